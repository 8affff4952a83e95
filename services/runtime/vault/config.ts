import { z } from 'zod';
import { asString, type EnvOverrides } from '../../../core/config/env.ts';

/**
 * The `vault` section: the directory of vault ciphertext kept as files on one machine (the gateway's
 * secrets; the runtime's provider vault before it moved into the database, imported from there).
 */
export const vaultSchema = z
  .object({
    persistenceDir: z
      .string()
      .optional()
      .describe(
        "Where vault ciphertext persists as files on one machine: the gateway's secrets (without the database store); the runtime's provider-vault files there are imported into the database at start-up",
      ),
  })
  .strict()
  .prefault({});

/** The environment variables of the vault's settings, and the config path each sets. */
export const VAULT_ENV: EnvOverrides = {
  VAULT_PERSISTENCE_DIR: { path: 'vault.persistenceDir', coerce: asString },
};
