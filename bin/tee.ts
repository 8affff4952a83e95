import type { Command } from 'commander';
import { VTPM_PLUGIN_NAME } from '../attestation/vtpm/name.ts';

export const EXECUTION_PROOF_ENV = 'SIGIL_EXECUTION_PROOF_KEY';
export const KEY_DERIVATION_ENV = 'SIGIL_KEY_DERIVATION_ROOT';

/** `sigil tee …`, registered without loading the TPM's code: `sigil tee seal` imports it when it runs. */
export function registerTeeCommands(program: Command, configPath: () => string | undefined): void {
  program
    .command('tee')
    .description('The TEE backend: seal its keys')
    .command('seal')
    .description(
      `Seal the execution-proof key, MCP_SIGNING_KEY and the key-derivation root to the TPM PCRs of the config's ${VTPM_PLUGIN_NAME} plugin, writing the sealed blobs to its sealedDir; keys come from ${EXECUTION_PROOF_ENV}, MCP_SIGNING_KEY and ${KEY_DERIVATION_ENV} (hex) when set; with --force, keys not given are kept from those sealed until now when the TPM still unseals them; else they are made anew`,
    )
    .option(
      '--force',
      'seal again over the keys in sealedDir, keeping each one not given (remove the folder to make all anew)',
    )
    .action(async (options: { force?: boolean }) => {
      const [{ loadConfig }, { sealConfiguredKeys }] = await Promise.all([
        import('../services/config.ts'),
        import('./tee/seal.ts'),
      ]);
      const loaded = loadConfig({ ...(configPath() ? { path: configPath() as string } : {}) });
      process.stdout.write(
        await sealConfiguredKeys(loaded, { force: options.force === true, env: process.env }),
      );
    });
}
