import { randomUUID, X509Certificate } from 'node:crypto';
import { access, mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SigilError } from '@sigil/plugin-api';
import { parseCertificateTable } from './cert-table.ts';

/**
 * The hardware side: a report from the SEV-SNP firmware through configfs-tsm, and the certificates
 * that go with it. configfs-tsm only: /dev/sev-guest's SNP_GET_EXT_REPORT is an ioctl, which Node
 * cannot make without a native addon.
 */

export const DEFAULT_TSM_REPORT_DIR = '/sys/kernel/config/tsm/report';
export const SEV_GUEST_DEVICE = '/dev/sev-guest';
/** The `provider` configfs-tsm names for the SEV-SNP guest driver. */
const SEV_PROVIDER = 'sev_guest';

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

const unavailable = (message: string, reason: string, lookedFor: readonly string[]) =>
  new SigilError('unavailable', message, {
    details: { reason, lookedFor },
    hint: 'Run on an SEV-SNP guest (Linux 6.7 or later, sev-guest driver, configfs mounted), or use tee-none on this machine',
  });

/** Why there is no report entry to make: what was looked for, and what /dev/sev-guest would need. */
async function noTsm(dir: string, error: NodeJS.ErrnoException): Promise<SigilError> {
  const what =
    error.code === 'ENOENT'
      ? `${dir} does not exist (configfs-tsm)`
      : `cannot make a report entry in ${dir} (${error.code ?? error.message})`;
  const device = (await exists(SEV_GUEST_DEVICE))
    ? `${SEV_GUEST_DEVICE} exists, but its SNP_GET_EXT_REPORT ioctl needs a native addon this plugin does not use`
    : `${SEV_GUEST_DEVICE} does not exist either`;
  return unavailable(`tee-sev-snp: no SEV-SNP guest interface here: ${what}; ${device}`, 'tee_unavailable', [
    dir,
    SEV_GUEST_DEVICE,
  ]);
}

export interface ExtendedReport {
  report: Buffer;
  /** The certificate table the host supplied with the report; empty when it supplied none. */
  certificateTable: Buffer;
}

/**
 * One report over `reportData` (64 bytes): an entry of our own in configfs-tsm (so no other writer
 * changes its inblob between our write and read), removed afterwards.
 */
export async function requestExtendedReport(dir: string, reportData: Uint8Array): Promise<ExtendedReport> {
  const entry = join(dir, `sigil-${randomUUID()}`);
  try {
    await mkdir(entry);
  } catch (error) {
    throw await noTsm(dir, error as NodeJS.ErrnoException);
  }
  try {
    const provider = await readFile(join(entry, 'provider'), 'utf8').then(
      (text) => text.trim(),
      () => {
        throw unavailable(
          `tee-sev-snp: ${dir} is no configfs-tsm report directory: an entry made there has no provider attribute`,
          'tee_unavailable',
          [dir],
        );
      },
    );
    if (provider !== SEV_PROVIDER) {
      throw unavailable(
        `tee-sev-snp: the configfs-tsm provider at ${dir} is ${provider}, not ${SEV_PROVIDER}: this is no SEV-SNP guest`,
        'tee_unavailable',
        [dir],
      );
    }
    // A guest running above VMPL 0 may only ask for reports at its own level or a less privileged one.
    const floor = Number(await readFile(join(entry, 'privlevel_floor'), 'utf8').catch(() => '0'));
    if (floor > 0) await writeFile(join(entry, 'privlevel'), String(floor));
    await writeFile(join(entry, 'inblob'), reportData);
    const report = await readFile(join(entry, 'outblob'));
    const certificateTable = await readFile(join(entry, 'auxblob'));
    return { report, certificateTable };
  } finally {
    await rmdir(entry).catch(() => undefined);
  }
}

/** The leaf, ASK and ARK the host put in the certificate table, PEM; what it left out is absent. */
export function tableCertificates(table: Uint8Array): { leaf?: string; ask?: string; ark?: string } {
  const found = parseCertificateTable(table);
  const pem = (der: Uint8Array | undefined) =>
    der === undefined ? undefined : new X509Certificate(der).toString();
  const leaf = pem(found.vcek ?? found.vlek);
  const ask = pem(found.ask);
  const ark = pem(found.ark);
  return {
    ...(leaf === undefined ? {} : { leaf }),
    ...(ask === undefined ? {} : { ask }),
    ...(ark === undefined ? {} : { ark }),
  };
}

/** The files a certificates directory may hold this chip's VCEK (or the cloud's VLEK) in, first found wins. */
export const LEAF_FILES = ['vcek.pem', 'vcek.der', 'vcek.crt', 'vlek.pem', 'vlek.der'] as const;

/** The VCEK (or VLEK) cached in `dir`, PEM, or undefined when none of LEAF_FILES is there. */
export async function cachedLeaf(dir: string): Promise<string | undefined> {
  for (const name of LEAF_FILES) {
    const bytes = await readFile(join(dir, name)).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    if (bytes !== undefined) return new X509Certificate(bytes).toString();
  }
  return undefined;
}
