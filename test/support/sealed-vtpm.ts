import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sealConfiguredKeys } from '../../bin/tee/seal.ts';
import type { PluginEntry } from '../../core/config/schema.ts';
import { configSchema } from '../../services/config.ts';
import { startSwtpm, type Swtpm } from './swtpm.ts';

/**
 * tee-vtpm on a swtpm of its own, its keys sealed by what `sigil tee seal` runs, from a config whose
 * plugins list this entry (and `MCP_SIGNING_KEY` when given, else a new key):
 *
 *     const tpm = await sealedVtpm();
 *     … plugins: [tpm.entry, …] …
 *     await tpm.remove();
 */
export interface SealedVtpmEntry {
  swtpm: Swtpm;
  /** The tee-vtpm entry of a config's `plugins`, on this TPM and its sealed keys. */
  entry: PluginEntry;
  /** What `sigil tee seal` printed (the kid of the sealed signing key, the AK's fingerprint). */
  printed: string;
  remove(): Promise<void>;
}

export async function sealedVtpm(mcpSigningKey?: string): Promise<SealedVtpmEntry> {
  const swtpm = await startSwtpm();
  const sealedDir = mkdtempSync(join(tmpdir(), 'sigil-vtpm-sealed-'));
  const entry: PluginEntry = {
    resolve: 'tee-vtpm',
    enabled: true,
    options: { tcti: swtpm.tcti, sealedDir },
  };
  const config = configSchema.parse({
    plugins: [entry],
    ...(mcpSigningKey === undefined ? {} : { runtime: { mcpSigningKey } }),
  });
  const printed = await sealConfiguredKeys(
    { config, file: undefined, envOverrides: [] },
    { force: false, env: {} },
  );
  return {
    swtpm,
    entry,
    printed,
    remove: async () => {
      await swtpm.remove();
      rmSync(sealedDir, { recursive: true, force: true });
    },
  };
}
