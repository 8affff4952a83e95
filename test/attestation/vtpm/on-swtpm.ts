import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TeeBackendV2 } from '@sigil/plugin-api';
import vtpm from '../../../attestation/vtpm/index.ts';
import { randomKey, SEALED_PURPOSES, type SealedPurpose } from '../../../attestation/vtpm/keys.ts';
import { sealKeys } from '../../../attestation/vtpm/seal.ts';
import { Tpm } from '../../../attestation/vtpm/tpm.ts';
import { SecretRegistry } from '../../../core/log.ts';
import { quietLogger } from '../../support/kernel.ts';
import { startSwtpm, type Swtpm } from '../../support/swtpm.ts';

/**
 * tee-vtpm on a swtpm of its own, its keys sealed as `sigil tee seal` seals them:
 *
 *     const vtpm = await sealedOnSwtpm();
 *     const backend = await vtpm.create();
 *     …
 *     await vtpm.remove();
 */
export interface SealedVtpm {
  swtpm: Swtpm;
  sealedDir: string;
  /** The keys sealed, by purpose. */
  keys: ReadonlyMap<SealedPurpose, Uint8Array>;
  /** A plugin instance on this TPM (what start-up makes), with `options` over the test's. */
  create(options?: Record<string, unknown>, secrets?: SecretRegistry): Promise<TeeBackendV2>;
  /** The same TPM rebooted (PCRs reset, seeds kept): later `create`s use it. */
  reboot(): Promise<void>;
  remove(): Promise<void>;
}

export async function sealedOnSwtpm(): Promise<SealedVtpm> {
  let swtpm = await startSwtpm();
  const sealedDir = mkdtempSync(join(tmpdir(), 'sigil-vtpm-sealed-'));
  const keys = new Map(SEALED_PURPOSES.map((purpose) => [purpose, randomKey()]));
  await sealKeys(new Tpm(swtpm.tcti), { sealedDir, pcrs: [0, 2, 4, 7], keys, force: false, now: new Date() });
  return {
    get swtpm() {
      return swtpm;
    },
    sealedDir,
    keys,
    create: async (options = {}, secrets = new SecretRegistry()) =>
      (await vtpm.create({
        config: vtpm.config.parse({ tcti: swtpm.tcti, sealedDir, ...options }),
        deps: { secrets },
        logger: quietLogger(),
      })) as TeeBackendV2,
    reboot: async () => {
      swtpm = await swtpm.restart();
    },
    remove: async () => {
      await swtpm.remove();
      rmSync(sealedDir, { recursive: true, force: true });
    },
  };
}
