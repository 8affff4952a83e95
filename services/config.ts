import { z } from 'zod';
import { readConfig, type LoadConfigOptions, type LoadedConfig as Loaded } from '../core/config/load.ts';
import { redactSecrets } from '../core/config/redact.ts';
import {
  authSchema,
  CORE_ENV,
  CORE_SECRET_PATHS,
  CORE_SETTINGS,
  pluginsSchema,
} from '../core/config/schema.ts';
import { DEV_CHAIN_ENV, devChainSchema } from '../devchain/config.ts';
import { GATEWAY_ENV, GATEWAY_SECRET_PATHS, GATEWAY_SESSION, gatewaySchema } from './gateway/config.ts';
import { RUNTIME_ENV, RUNTIME_SECRET_PATHS, RUNTIME_SESSION, runtimeSchema } from './runtime/config.ts';
import {
  DEV_DEPOSIT_MNEMONIC,
  LEDGER_ENV,
  LEDGER_SECRET_PATHS,
  ledgerSchema,
} from './runtime/ledger/config.ts';
import { VAULT_ENV, vaultSchema } from './runtime/vault/config.ts';

/** What `sigil up` runs with no config: no TEE, MCP servers from npm, the util-linux sandbox. */
export const DEFAULT_PLUGINS = ['tee-none', 'registry-npm', 'sandbox-linux-namespaces'] as const;

/** Sigil's config, `sigil.config.json`: core's settings with the sections of the runtime and the gateway. */
export const configSchema = z
  .object({
    ...CORE_SETTINGS,
    auth: authSchema({ ...RUNTIME_SESSION, ...GATEWAY_SESSION }).prefault({}),
    runtime: runtimeSchema,
    gateway: gatewaySchema,
    vault: vaultSchema,
    devChain: devChainSchema,
    ledger: ledgerSchema,
    plugins: pluginsSchema(DEFAULT_PLUGINS),
  })
  .strict()
  .superRefine((config, ctx) => {
    // A chat refreshes its hold before each tool call: the TTL must outlast the longest one.
    if (config.ledger.holdTtlSeconds <= config.gateway.toolCallTimeoutSeconds) {
      ctx.addIssue({
        code: 'custom',
        path: ['ledger', 'holdTtlSeconds'],
        message: `must be longer than gateway.toolCallTimeoutSeconds (${config.gateway.toolCallTimeoutSeconds}): a running chat's hold would expire during one tool call`,
      });
    }
    if (config.mode === 'production' && config.ledger.depositMnemonic?.trim() === DEV_DEPOSIT_MNEMONIC) {
      ctx.addIssue({
        code: 'custom',
        path: ['ledger', 'depositMnemonic'],
        message: 'is the public dev mnemonic, refused in production: generate a mnemonic of your own',
      });
    }
  });

export type SigilConfig = z.infer<typeof configSchema>;
/** The config as a file or the environment gives it, before the schema fills in its defaults. */
export type SigilConfigInput = z.input<typeof configSchema>;
export type LoadedConfig = Loaded<SigilConfig>;

/** Every environment variable the config honours, and the config path it sets. */
export const ENV_OVERRIDES = {
  ...CORE_ENV,
  ...RUNTIME_ENV,
  ...GATEWAY_ENV,
  ...VAULT_ENV,
  ...DEV_CHAIN_ENV,
  ...LEDGER_ENV,
};

/** Config paths whose values are secrets: redacted in every printout. */
export const SECRET_CONFIG_PATHS = [
  ...CORE_SECRET_PATHS,
  ...RUNTIME_SECRET_PATHS,
  ...GATEWAY_SECRET_PATHS,
  ...LEDGER_SECRET_PATHS,
];

/** The effective config: the file (--config, else SIGIL_CONFIG, else ./sigil.config.json) and the env. */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  return readConfig({ schema: configSchema, env: ENV_OVERRIDES }, options);
}

/** The effective config with every secret replaced, for `sigil config check` and logs. */
export function redactConfig(config: SigilConfig): Record<string, unknown> {
  return redactSecrets(config, SECRET_CONFIG_PATHS);
}

/** JSON Schema of the config file, for editor completion (`"$schema"` in sigil.config.json). */
export function configJsonSchema(): unknown {
  return z.toJSONSchema(configSchema, { io: 'input' });
}
