import { describeUrl } from '../db/database.ts';
import type { CoreConfig } from './schema.ts';

/**
 * The effective config with every secret replaced, for `sigil config check` and logs: the values at
 * `secretPaths` (`section.key`), the database URL's password, and plugin options named like secrets.
 */
export function redactSecrets(config: CoreConfig, secretPaths: readonly string[]): Record<string, unknown> {
  const copy = structuredClone(config) as unknown as Record<string, unknown>;
  for (const path of secretPaths) {
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
