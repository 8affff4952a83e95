import { fifoRedirect } from './stdio.ts';

/**
 * The shell a container's command runs under when its image has one (`/bin/sh -c SCRIPT <name>
 * command…`): to clean its environment, to redirect its stdio onto the runtime's pipes (stdio.ts),
 * and to take its environment from stdin.
 *
 * Secrets over stdin (`secretDelivery: 'stdin'`): the runtime writes one `export NAME='value'` line
 * per variable on the container's stdin, then an empty line, then hands stdin to the caller; the
 * script reads up to the empty line (sh's `read` takes a byte at a time from a pipe, so not one byte
 * of the caller's messages is consumed), runs those lines, and starts the server, which inherits the
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

/** `$0` of the scripts: what `ps` inside shows for the shell. */
export const SCRIPT_NAME = 'sigil-sandbox';

/** How a container starts its command. */
export interface ContainerEntry {
  entrypoint: string[];
  cmd: string[];
  /** Whether the engine puts its own init (tini, bound from the engine's host) in as PID 1. */
  engineInit: boolean;
}

/**
 * The entry of a container running `command`. An image with `/bin/sh` runs it under a script (the
 * stdio pipes, the environment from stdin), and with `init` that shell is PID 1 itself: it runs the
 * command as its child and waits, reaping whatever the command orphans meanwhile (sh waits for any
 * child), then ends with its status (128 + N for a death by signal N). The engine's init would be a
 * bind of its host's binary, and its environment the engine's; the shell starts with the engine's
 * too, so it first execs itself with the engine's HOSTNAME gone: PID 1's environment is then the
 * container's. An image without a shell runs its command as it is, under the engine's init with
 * `init`, with the engine's HOSTNAME in its environment.
 *
 * PID 1 ignores a signal it has no handler for (the engine's SIGTERM of `docker stop`, too, which
 * ends in SIGKILL after its timeout); this runtime only ever kills with SIGKILL.
 */
export function containerEntry(
  command: string[],
  needs: {
    shell: boolean;
    /** Run an init as PID 1 (the plugin's `init`). */
    init: boolean;
    /** The pipes' directory, when stdio goes through them (stdio.ts). */
    fifoDir: string | undefined;
    /** Whether the environment comes over stdin. */
    environment: boolean;
    /** Whether the launch itself sets HOSTNAME (the engine's value is dropped otherwise). */
    keepHostname: boolean;
  },
): ContainerEntry {
  if (!needs.shell) return { entrypoint: command, cmd: [], engineInit: needs.init };
  // The engine puts HOSTNAME in every container's environment, and sh exports the directory it
  // starts in: the server's environment is the spec's.
  const dropEngineVariables = `unset PWD OLDPWD${needs.keepHostname ? '' : ' HOSTNAME'}`;
  const script = [
    dropEngineVariables,
    ...(needs.fifoDir === undefined ? [] : [fifoRedirect(needs.fifoDir)]),
    ...(needs.environment ? READ_ENVIRONMENT : []),
    // Not the last command, so no shell execs it in its own place.
    ...(needs.init ? ['"$@"', 'exit $?'] : ['exec "$@"']),
  ].join('\n');
  const entrypoint = needs.init
    ? ['/bin/sh', '-c', `${dropEngineVariables}\nexec /bin/sh -c "$@"`, SCRIPT_NAME, script, SCRIPT_NAME]
    : ['/bin/sh', '-c', script, SCRIPT_NAME];
  return { entrypoint, cmd: command, engineInit: false };
}

const quote = (value: string) => `'${value.replace(/'/g, `'\\''`).replace(/\n/g, `'"$__sigil_nl"'`)}'`;

/** The lines the script reads: one export per variable, then the empty line that ends them. */
export function environmentPreamble(env: Readonly<Record<string, string>>): string {
  return `${Object.entries(env)
    .map(([name, value]) => `export ${name}=${quote(value)}\n`)
    .join('')}\n`;
}
