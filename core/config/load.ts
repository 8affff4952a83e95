import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import type { EnvOverrides } from './env.ts';

/**
 * The parse options of a schema parsed once or a few times per process (the config, a plugin's options,
 * the catalog): zod's eval fast path would compile a function per object schema on its first parse,
 * ~20 ms of a start for the config alone (issue 30) and more than it saves on so few parses; a request's
 * schemas keep it.
 */
export const PARSED_ONCE = { jitless: true } as const;

export interface ConfigIssue {
  /** Dotted path in the config, e.g. `log.level` or `plugins.0.options.url`. */
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

/** A deployment's config: the schema its sections compose, and the environment variables that set them. */
export interface ConfigDefinition<Config> {
  schema: z.ZodType<Config>;
  env: EnvOverrides;
}

export interface LoadedConfig<Config> {
  config: Config;
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

/** Reads the config file and the environment, and checks them against the definition's schema. */
export function readConfig<Config>(
  definition: ConfigDefinition<Config>,
  options: LoadConfigOptions = {},
): LoadedConfig<Config> {
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
  for (const [name, { path, coerce }] of Object.entries(definition.env)) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    setPath(raw, path, coerce(value));
    envOverrides.push(name);
  }
  const parsed = definition.schema.safeParse(raw, PARSED_ONCE);
  if (!parsed.success) {
    throw new ConfigError(
      parsed.error.issues.map((issue) => {
        const path = issue.path.join('.');
        // A variable that sets a list or an object is also to blame for a field inside it.
        const fromEnv = Object.entries(definition.env).find(
          ([name, o]) => (path === o.path || path.startsWith(`${o.path}.`)) && envOverrides.includes(name),
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
