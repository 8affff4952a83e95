import { mkdirSync, readFileSync, renameSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Logger } from '../core/log.ts';

/**
 * Makes `path` ready for anvil's `--state`: its directory exists (owner only, as the data directory
 * above it is, should this create it before the database does), and a file there that is not an anvil state (cut short by a crash
 * mid-write, edited, empty) is moved aside, because anvil refuses to start on it. A new chain then
 * starts, and the services detect it as one (see the chain identity of the ledger and the payments).
 * Returns the absolute path.
 */
export function prepareStateFile(path: string, logger: Logger): string {
  const absolute = resolve(path);
  mkdirSync(dirname(absolute), { recursive: true, mode: 0o700 });
  let text: string;
  try {
    text = readFileSync(absolute, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return absolute; // first start
    throw err;
  }
  const problem = stateProblem(text);
  if (problem === undefined) return absolute;
  const aside = `${absolute}.unreadable-${Date.now()}`;
  renameSync(absolute, aside);
  logger.warn(
    { state: absolute, movedTo: aside, problem },
    'dev chain: the saved chain state cannot be loaded; it was moved aside and a new chain starts',
  );
  return absolute;
}

/** Why `text` is not a state anvil can load, or undefined when it looks like one. */
function stateProblem(text: string): string | undefined {
  let state: unknown;
  try {
    state = JSON.parse(text);
  } catch (err) {
    return `not JSON: ${(err as Error).message}`;
  }
  if (typeof state !== 'object' || state === null) return 'not a JSON object';
  // The two fields anvil requires of a state (`SerializableState`).
  for (const field of ['block', 'accounts']) {
    if (!(field in state)) return `no "${field}" field`;
  }
  return undefined;
}
