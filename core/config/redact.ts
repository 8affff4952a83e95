import { describeUrl } from '../db/database.ts';
import type { CoreConfig } from './schema.ts';

/**
 * The effective config with every secret replaced, for `sigil config check` and logs: the values at
 * `secretPaths` (dotted: `section.key`, `section.group.key`), the database URL's password, and plugin options named like secrets.
 */
export function redactSecrets(config: CoreConfig, secretPaths: readonly string[]): Record<string, unknown> {
  const copy = structuredClone(config) as unknown as Record<string, unknown>;
  for (const path of secretPaths) {
    const found = holderOf(copy, path);
    if (found === undefined) continue;
    const [holder, last] = found;
    const value = holder[last];
    // An empty list holds no secret, and shown as one it would read as a key being set.
    if (value !== undefined && !(Array.isArray(value) && value.length === 0)) holder[last] = '[REDACTED]';
  }
  const database = copy.database as { url: string };
  database.url = describeUrl(database.url);
  for (const plugin of copy.plugins as { options: Record<string, unknown> }[]) {
    plugin.options = redactSecretLookingKeys(plugin.options);
  }
  return copy;
}

/**
 * The object in `root` that holds the dotted `path`'s last key, with that key; undefined when an
 * object on the way is missing.
 */
export function holderOf(
  root: Record<string, unknown>,
  path: string,
): [Record<string, unknown>, string] | undefined {
  const keys = path.split('.');
  const last = keys.pop() as string;
  let holder: Record<string, unknown> | undefined = root;
  for (const key of keys) holder = holder?.[key] as Record<string, unknown> | undefined;
  return holder === undefined ? undefined : [holder, last];
}

const SECRET_KEY_PATTERN = /(secret|password|token|private|api[-_]?key|mnemonic|seed|material)/i;

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
