import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import { configSchema, SECRET_CONFIG_PATHS, type SigilConfig } from './schema.ts';
import { describeUrl } from '../db/database.ts';

type Coerce = (raw: string) => unknown;
const asString: Coerce = (raw) => raw;
const asInt: Coerce = (raw) => (/^\d+$/.test(raw) ? Number(raw) : raw);
const asBool: Coerce = (raw) =>
  ['true', '1', 'yes'].includes(raw) ? true : ['false', '0', 'no'].includes(raw) ? false : raw;
const asList: Coerce = (raw) =>
  raw
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);

/** Every environment variable the config honours, and the config path it sets. */
export const ENV_OVERRIDES: Record<string, { path: string; coerce: Coerce }> = {
  SIGIL_MODE: { path: 'mode', coerce: asString },
  LOG_LEVEL: { path: 'log.level', coerce: asString },
  LOG_FORMAT: { path: 'log.format', coerce: asString },
  DATABASE_URL: { path: 'database.url', coerce: asString },
  SIGIL_DATA_KEY: { path: 'database.dataKey', coerce: asString },
  RUNTIME_HOST: { path: 'runtime.host', coerce: asString },
  RUNTIME_PORT: { path: 'runtime.port', coerce: asInt },
  RUNTIME_PUBLIC_URL: { path: 'runtime.publicUrl', coerce: asString },
  RUNTIME_ALLOWED_HOSTS: { path: 'runtime.http.allowedHosts', coerce: asList },
  RUNTIME_ALLOWED_ORIGINS: { path: 'runtime.http.allowedOrigins', coerce: asList },
  MCP_SIGNING_KEY: { path: 'runtime.mcpSigningKey', coerce: asString },
  MCP_SIGNING_KEY_PREVIOUS: { path: 'runtime.mcpSigningKeyPrevious', coerce: asString },
  RUNTIME_OPERATOR_KEY: { path: 'runtime.operatorKey', coerce: asString },
  PROVIDER_API_KEY: { path: 'runtime.providerApiKey', coerce: asString },
  RUNTIME_CHAT_INTERNAL_KEY: { path: 'runtime.chat.internalKey', coerce: asBool },
  RUNTIME_GATEWAY_PATH: { path: 'runtime.chat.gatewayPath', coerce: asString },
  RUNTIME_GATEWAY_URL: { path: 'runtime.chat.gatewayUrl', coerce: asString },
  GATEWAY_HOST: { path: 'gateway.host', coerce: asString },
  GATEWAY_PORT: { path: 'gateway.port', coerce: asInt },
  GATEWAY_PUBLIC_URL: { path: 'gateway.publicUrl', coerce: asString },
  GATEWAY_ALLOWED_HOSTS: { path: 'gateway.http.allowedHosts', coerce: asList },
  GATEWAY_ALLOWED_ORIGINS: { path: 'gateway.http.allowedOrigins', coerce: asList },
  GATEWAY_SECRET_KEY: { path: 'gateway.secretKey', coerce: asString },
  OPERATOR_WALLETS: { path: 'gateway.operatorWallets', coerce: asList },
  ERC8128_ENFORCE_OPERATOR_MCP: { path: 'gateway.erc8128EnforceOperatorMcp', coerce: asBool },
  GATEWAY_WARMUP: { path: 'gateway.warmupAtStart', coerce: asBool },
  GATEWAY_CATALOG: { path: 'gateway.catalogFile', coerce: asString },
  GATEWAY_DELEGATION: { path: 'gateway.delegation.enabled', coerce: asBool },
  GATEWAY_RUNTIME_URL: { path: 'gateway.delegation.runtimeUrl', coerce: asString },
  VAULT_PERSISTENCE_DIR: { path: 'vault.persistenceDir', coerce: asString },
  SIGIL_JWT_SIGNING_KEY: { path: 'auth.jwtSigningKey', coerce: asString },
  DEV_CHAIN: { path: 'devChain.enabled', coerce: asBool },
  DEV_CHAIN_PORT: { path: 'devChain.port', coerce: asInt },
  DEV_CHAIN_STATE_FILE: { path: 'devChain.stateFile', coerce: asString },
  LEDGER_DEPOSIT_MNEMONIC: { path: 'ledger.depositMnemonic', coerce: asString },
  LEDGER_RPC_URL: { path: 'ledger.rpcUrl', coerce: asString },
  LEDGER_TOKEN_ADDRESS: { path: 'ledger.tokenAddress', coerce: asString },
  LEDGER_TREASURY: { path: 'ledger.treasury', coerce: asString },
  LEDGER_OPERATOR_KEY: { path: 'ledger.operatorKey', coerce: asString },
  LEDGER_CONFIRMATIONS: { path: 'ledger.confirmations', coerce: asInt },
};

export interface ConfigIssue {
  /** Dotted path in the config, e.g. `gateway.port` or `plugins.0.options.url`. */
  path: string;
  message: string;
  /** Where the bad value came from: the file, an env variable, or a plugin's schema. */
  source: string;
}

export class ConfigError extends SigilError {
  readonly issues: ConfigIssue[];
  constructor(issues: ConfigIssue[]) {
    super('config_invalid', formatIssues(issues));
    this.issues = issues;
  }
}

export function formatIssues(issues: readonly ConfigIssue[]): string {
  return issues.map((issue) => `${issue.source}: ${issue.path || '(root)'}: ${issue.message}`).join('\n');
}

export interface LoadedConfig {
  config: SigilConfig;
  /** The file read, or undefined when embedded defaults ran. */
  file: string | undefined;
  /** Env variables that overrode a value. */
  envOverrides: string[];
}

export interface LoadConfigOptions {
  /** Explicit path (from --config); otherwise SIGIL_CONFIG, then ./sigil.config.json if present. */
  path?: string;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  const explicit = options.path ?? (env.SIGIL_CONFIG || undefined);
  const candidate = resolve(cwd, explicit ?? 'sigil.config.json');
  let raw: Record<string, unknown> = {};
  let file: string | undefined;
  if (existsSync(candidate)) {
    file = candidate;
    raw = readJsonObject(candidate);
  } else if (explicit !== undefined) {
    throw new ConfigError([
      { path: '', message: `config file not found: ${candidate}`, source: 'SIGIL_CONFIG/--config' },
    ]);
  }
  const envOverrides: string[] = [];
  for (const [name, { path, coerce }] of Object.entries(ENV_OVERRIDES)) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    setPath(raw, path, coerce(value));
    envOverrides.push(name);
  }
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(
      parsed.error.issues.map((issue) => {
        const path = issue.path.join('.');
        const fromEnv = Object.entries(ENV_OVERRIDES).find(
          ([name, o]) => o.path === path && envOverrides.includes(name),
        );
        return { path, message: issue.message, source: fromEnv ? `env ${fromEnv[0]}` : (file ?? 'defaults') };
      }),
    );
  }
  return { config: parsed.data, file, envOverrides };
}

function readJsonObject(file: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, 'utf8'));
  } catch (cause) {
    throw new ConfigError([
      { path: '', message: `not valid JSON (${(cause as Error).message})`, source: file },
    ]);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ConfigError([{ path: '', message: 'must be a JSON object', source: file }]);
  }
  return value as Record<string, unknown>;
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  let node = target;
  for (const key of keys.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[keys[keys.length - 1] as string] = value;
}

/** The effective config with every secret replaced, for `sigil config check` and logs. */
export function redactConfig(config: SigilConfig): Record<string, unknown> {
  const copy = structuredClone(config) as unknown as Record<string, unknown>;
  for (const path of SECRET_CONFIG_PATHS) {
    const [section, key] = path.split('.') as [string, string];
    const holder = copy[section] as Record<string, unknown> | undefined;
    if (holder && holder[key] !== undefined) holder[key] = '[REDACTED]';
  }
  const database = copy.database as { url: string };
  database.url = describeUrl(database.url);
  for (const plugin of copy.plugins as { options: Record<string, unknown> }[]) {
    plugin.options = redactSecretLookingKeys(plugin.options);
  }
  return copy;
}

const SECRET_KEY_PATTERN = /(secret|password|token|private|api[-_]?key|mnemonic|seed)/i;

/** Plugin options have no central list of secret paths, so their names decide. */
function redactSecretLookingKeys(options: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(options).map(([key, value]) => [
      key,
      SECRET_KEY_PATTERN.test(key)
        ? '[REDACTED]'
        : typeof value === 'object' && value !== null && !Array.isArray(value)
          ? redactSecretLookingKeys(value as Record<string, unknown>)
          : value,
    ]),
  );
}

/** JSON Schema of the config file, for editor completion (`"$schema"` in sigil.config.json). */
export function configJsonSchema(): unknown {
  return z.toJSONSchema(configSchema, { io: 'input' });
}
