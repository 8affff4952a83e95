import { SigilError } from '@sigil/plugin-api';
import { runGit } from '@sigil/plugin-api/canvas';

/**
 * The commit of one node run, marked with its idempotency key in a trailer: a run that crashed after
 * committing, called again with the same key, finds the commit and writes nothing more.
 */

const TRAILER = 'Sigil-Idempotency-Key';
/** Paths are names, never patterns: `*.html` is the file of that name. */
const LITERAL = { GIT_LITERAL_PATHSPECS: '1' };

/** The trailer line for `key`; a key that could break out of its line is refused. */
function trailerOf(key: string): string {
  const control = [...key].some((char) => char < ' ' || char === '\x7f');
  if (key.length === 0 || control)
    throw new SigilError('invalid_request', 'The idempotency key is empty or holds control characters', {
      details: { reason: 'invalid_idempotency_key' },
    });
  return `${TRAILER}: ${key}`;
}

/** The commit on HEAD's history made under `key`, if any. */
export async function commitOf(dir: string, key: string, signal: AbortSignal): Promise<string | undefined> {
  const trailer = trailerOf(key);
  const log = await runGit(dir, ['log', '--fixed-strings', `--grep=${trailer}`, '--format=%H%x1f%B%x1e'], {
    signal,
  });
  for (const record of log.split('\x1e')) {
    const [sha, body = ''] = record.trim().split('\x1f');
    // --grep matches a part of a line; the key must be the whole of it.
    if (sha && body.split('\n').includes(trailer)) return sha;
  }
  return undefined;
}

/** Commits exactly `paths` (whatever else is staged stays so), marked with `key`; the new HEAD. */
export async function commitFiles(
  dir: string,
  paths: readonly string[],
  { key, subject, signal }: { key: string; subject: string; signal: AbortSignal },
): Promise<string> {
  const options = { signal, env: LITERAL };
  await runGit(dir, ['add', '--force', '--', ...paths], options);
  // --allow-empty: files already as written still get their commit, which records the key.
  await runGit(
    dir,
    [
      'commit',
      '--quiet',
      '--allow-empty',
      '--no-verify',
      '-m',
      subject,
      '-m',
      trailerOf(key),
      '--',
      ...paths,
    ],
    options,
  );
  return runGit(dir, ['rev-parse', 'HEAD'], { signal });
}
