import { z } from 'zod';
import { configSchema, ENV_OVERRIDES, SECRET_CONFIG_PATHS } from '../services/config.ts';
import type { PluginManifest } from '@sigil/plugin-api';
import { builtinPlugins } from '../services/builtin-plugins.ts';

/** The part of a JSON Schema (draft 2020-12, as zod writes it) this reference reads. */
interface JsonSchema {
  type?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  const?: unknown;
  format?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  additionalProperties?: JsonSchema | boolean;
}

/** One documented setting: a leaf of the config, or an object whose keys are not fixed. */
export interface Setting {
  path: string;
  type: string;
  default: unknown;
  env: string | undefined;
  secret: boolean;
  description: string | undefined;
}

const envByPath = new Map(Object.entries(ENV_OVERRIDES).map(([name, { path }]) => [path, name]));
const secretPaths = new Set<string>(SECRET_CONFIG_PATHS);

/** Every setting of `sigil.config.json`, in schema order, with the default the parser really applies. */
export function configSettings(): Setting[] {
  const schema = z.toJSONSchema(configSchema, { io: 'input' }) as JsonSchema;
  const defaults = configSchema.parse({});
  return settingsOf(schema, defaults, '').filter((setting) => setting.path !== '$schema');
}

/** The settings of each built-in plugin's `options`, by plugin name. */
export async function pluginSettings(): Promise<{ name: string; kind: string; settings: Setting[] }[]> {
  const plugins = [];
  for (const load of Object.values(builtinPlugins)) {
    const manifest = ((await load()) as { default: PluginManifest }).default;
    const schema = z.toJSONSchema(manifest.config, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
    const parsed = manifest.config.safeParse({});
    const settings = settingsOf(schema, parsed.success ? parsed.data : undefined, '').map((setting) => ({
      ...setting,
      env: undefined,
      secret: false,
    }));
    plugins.push({ name: manifest.name, kind: manifest.kind, settings });
  }
  return plugins.sort((a, b) => a.name.localeCompare(b.name));
}

function settingsOf(schema: JsonSchema, defaults: unknown, prefix: string): Setting[] {
  return Object.entries(schema.properties ?? {}).flatMap(([key, property]) => {
    const path = prefix ? `${prefix}.${key}` : key;
    const value = isRecord(defaults) ? defaults[key] : undefined;
    if (property.type === 'object' && property.properties) return settingsOf(property, value, path);
    return [
      {
        path,
        type: typeOf(property),
        default: value ?? property.default,
        env: envByPath.get(path),
        secret: secretPaths.has(path),
        description: property.description,
      },
    ];
  });
}

function typeOf(schema: JsonSchema): string {
  if (schema.anyOf) return schema.anyOf.map(typeOf).join(' or ');
  if (schema.enum) return schema.enum.map((value) => JSON.stringify(value)).join(' \\| ');
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.type === 'array') return `${schema.items ? typeOf(schema.items) : 'any'}[]`;
  if (schema.type === 'object') return 'object';
  if (schema.type === 'string' && schema.format === 'uri') return 'URL';
  if (schema.type === 'integer' || schema.type === 'number') return `${schema.type}${range(schema)}`;
  return schema.type ?? 'any';
}

function range(schema: JsonSchema): string {
  const max = schema.maximum === Number.MAX_SAFE_INTEGER ? undefined : schema.maximum;
  const above = schema.minimum === undefined ? schema.exclusiveMinimum : undefined;
  // A number above a bound (zod's positive()) has no least value; an integer's is the next one.
  if (above !== undefined && schema.type === 'number')
    return max === undefined ? ` > ${above}` : ` > ${above}, ≤ ${max}`;
  const min = schema.minimum ?? (above === undefined ? undefined : above + 1);
  if (min === undefined) return max === undefined ? '' : ` ≤ ${max}`;
  return max === undefined ? ` ≥ ${min}` : ` ${min}–${max}`;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A markdown table of settings, one row each: key, type, default, meaning, and the environment variable
 * when `withEnv` (plugin options have none).
 */
export function settingsTable(settings: readonly Setting[], withEnv = true): string {
  const header = withEnv
    ? ['key', 'type', 'default', 'env', 'meaning']
    : ['key', 'type', 'default', 'meaning'];
  const rows = settings.map((setting) => {
    const notes = [
      setting.description,
      setting.secret ? '**Secret**: redacted from every printout.' : undefined,
    ]
      .filter(Boolean)
      .join(' ');
    const env = setting.env ? `\`${setting.env}\`` : '';
    const cells = [
      `\`${setting.path}\``,
      setting.type,
      defaultText(setting.default),
      ...(withEnv ? [env] : []),
      notes,
    ];
    return `| ${cells.map(cell).join(' | ')} |`;
  });
  return [`| ${header.join(' | ')} |`, `| ${header.map(() => '---').join(' | ')} |`, ...rows].join('\n');
}

/** Longer defaults (the plugin list, a provider's model catalog) are summarised: a table cell cannot hold them. */
const MAX_DEFAULT_CHARS = 100;

function defaultText(value: unknown): string {
  if (value === undefined) return '–';
  const text = JSON.stringify(value, (_key, item: unknown) =>
    typeof item === 'bigint' ? item.toString() : item,
  );
  if (text.length <= MAX_DEFAULT_CHARS) return `\`${text}\``;
  return Array.isArray(value) ? `${value.length} entries` : 'an object (see the meaning)';
}

/** Text for one table cell: no line breaks, and pipes that cannot end the cell. */
export function cell(text: string): string {
  return text
    .replace(/\n+/g, ' ')
    .replace(/(?<!\\)\|/g, '\\|')
    .replace(/(?<![`\\*])\*(?![`*])/g, '\\*');
}
