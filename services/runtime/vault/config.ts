import { z } from 'zod';
import { asString, type EnvOverrides } from '../../../core/config/env.ts';

/** The `vault` section: where the runtime's vault of provider keys keeps its ciphertext. */
export const vaultSchema = z
  .object({
    persistenceDir: z.string().optional().describe('Where vault ciphertext persists'),
  })
  .strict()
  .prefault({});

/** The environment variables of the vault's settings, and the config path each sets. */
export const VAULT_ENV: EnvOverrides = {
  VAULT_PERSISTENCE_DIR: { path: 'vault.persistenceDir', coerce: asString },
};
