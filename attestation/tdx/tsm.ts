import { access, mkdtemp, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SigilError } from '@sigil/plugin-api';

/**
 * Quotes through configfs-tsm (Linux ≥ 6.7, Documentation/ABI/testing/configfs-tsm): a directory made
 * under the report root is one request; writing 64 bytes to its `inblob` and reading `outblob` gives
 * a quote over them from the provider the kernel bound, here `tdx_guest`.
 */

export const TSM_REPORT_ROOT = '/sys/kernel/config/tsm/report';
/** The TDX guest driver's device: present in a TD even where configfs-tsm is not. */
const TDX_GUEST_DEVICE = '/dev/tdx_guest';
const TDX_PROVIDER = 'tdx_guest';

export type TsmProbe = { available: true } | { available: false; reason: string };

const exists = (path: string): Promise<boolean> =>
  access(path).then(
    () => true,
    () => false,
  );

/** Runs `use` on a fresh report entry, removed afterwards. */
async function withEntry<T>(root: string, use: (entry: string) => Promise<T>): Promise<T> {
  const entry = await mkdtemp(join(root, 'sigil-'));
  try {
    return await use(entry);
  } finally {
    await rmdir(entry).catch(() => undefined);
  }
}

const readText = async (path: string): Promise<string> => (await readFile(path, 'utf8')).trim();

/** Whether this machine quotes as a TDX guest through configfs-tsm at `root`, and if not, why not. */
export async function probeTsm(root: string): Promise<TsmProbe> {
  if (!(await exists(root))) {
    const device = (await exists(TDX_GUEST_DEVICE))
      ? `${TDX_GUEST_DEVICE} exists, but this kernel has no configfs-tsm (CONFIG_TSM_REPORTS, Linux ≥ 6.7), the only way tee-tdx quotes`
      : `nor does ${TDX_GUEST_DEVICE}: this is no TDX guest`;
    return { available: false, reason: `${root} does not exist (configfs-tsm), ${device}` };
  }
  try {
    const provider = await withEntry(root, (entry) => readText(join(entry, 'provider')));
    return provider === TDX_PROVIDER
      ? { available: true }
      : { available: false, reason: `configfs-tsm at ${root} quotes with ${provider}, not ${TDX_PROVIDER}` };
  } catch (error) {
    return {
      available: false,
      reason: `configfs-tsm at ${root} gives no provider: ${(error as Error).message}`,
    };
  }
}

/** A quote over `reportData` (64 bytes) from configfs-tsm at `root`. */
export function tsmQuote(root: string, reportData: Uint8Array): Promise<Uint8Array> {
  return withEntry(root, async (entry) => {
    await writeFile(join(entry, 'inblob'), reportData);
    // The kernel counts writes to the entry; a changed count means the quote is not over our inblob.
    const generation = await readText(join(entry, 'generation'));
    const quote = await readFile(join(entry, 'outblob'));
    if ((await readText(join(entry, 'generation'))) !== generation)
      throw new SigilError('conflict', 'configfs-tsm: the report entry changed while the quote was read', {
        details: { reason: 'tsm_generation_changed' },
      });
    return new Uint8Array(quote);
  });
}
