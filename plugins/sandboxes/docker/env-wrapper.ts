import { FIFO_REDIRECT } from './stdio.ts';

/**
 * The shell a container's command runs under when its image has one (`/bin/sh -c SCRIPT <name>
 * command…`): to clean its environment, to redirect its stdio onto the runtime's pipes (stdio.ts),
 * and to take its environment from stdin.
 *
 * Secrets over stdin (`secretDelivery: 'stdin'`): the runtime writes one `export NAME='value'` line
 * per variable on the container's stdin, then an empty line, then hands stdin to the caller; the
 * script reads up to the empty line (sh's `read` takes a byte at a time from a pipe, so not one byte
 * of the caller's messages is consumed), runs those lines, and execs the server, which inherits the
 * variables and the rest of stdin. The values thus reach the server's environment without passing
 * through the engine's container config: `docker inspect` and the engine's state on disk never hold
 * them. A value is single-quoted, and each newline in it becomes `'"$__sigil_nl"'`, so every
 * variable is one line; names are shell identifiers (spec.ts), so nothing outside the quotes is the
 * caller's.
 */
const READ_ENVIRONMENT = [
  "__sigil_nl='",
  "'",
  'while IFS= read -r __sigil_line; do',
  '  [ -z "$__sigil_line" ] && break',
  '  eval "$__sigil_line" || exit 125',
  'done',
  'unset __sigil_line __sigil_nl',
];

/** `$0` of the script: what `ps` inside shows until the exec. */
export const SCRIPT_NAME = 'sigil-sandbox';

/**
 * The script a container with `/bin/sh` runs its command under; undefined for an image without one
 * (its command then runs as it is, with the engine's HOSTNAME in its environment).
 */
export function entryScript(needs: {
  shell: boolean;
  fifo: boolean;
  environment: boolean;
  /** Whether the launch itself sets HOSTNAME (the engine's value is dropped otherwise). */
  keepHostname: boolean;
}): string | undefined {
  if (!needs.shell) return undefined;
  return [
    // The engine puts HOSTNAME in every container's environment, and sh exports the directory it
    // starts in: the server's environment is the spec's.
    `unset PWD OLDPWD${needs.keepHostname ? '' : ' HOSTNAME'}`,
    ...(needs.fifo ? [FIFO_REDIRECT] : []),
    ...(needs.environment ? READ_ENVIRONMENT : []),
    'exec "$@"',
  ].join('\n');
}

const quote = (value: string) => `'${value.replace(/'/g, `'\\''`).replace(/\n/g, `'"$__sigil_nl"'`)}'`;

/** The lines the script reads: one export per variable, then the empty line that ends them. */
export function environmentPreamble(env: Readonly<Record<string, string>>): string {
  return `${Object.entries(env)
    .map(([name, value]) => `export ${name}=${quote(value)}\n`)
    .join('')}\n`;
}
