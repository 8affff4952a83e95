import { EGRESS_FORWARDER, EGRESS_SOCKET, SANDBOX_ID } from './root.ts';

/**
 * The launch chain, one exec after another (no extra process but the mount helpers):
 *
 *   [unshare -m → sh -c LEND]  (as root, only when a path is lent: a mount namespace of its own,
 *                               where paths the sandbox user cannot reach are bound where it can)
 *   setpriv  (as root: become the sandbox user; always: die with the runtime, PR_SET_PDEATHSIG)
 *   └ unshare  (new user, mount, network, PID, IPC and UTS namespaces; the user namespace maps only
 *     │         the sandbox user, to itself; --kill-child: its child dies with it)
 *     └ sh -c SETUP  (PID 1 of the new namespace, holding capabilities only inside it)
 *         joins its cgroups, copies the skeleton onto a tmpfs, `mount -a` the sandbox root,
 *         loopback up (allow-list only),
 *         opens the syscall filter's loader on fd 9 (seccomp.ts), pivot_root into the new root and
 *         detaches the host's
 *         (rlimits: the shell's ulimit, or prlimit when core dumps go to a pipe helper)
 *       → setpriv  (drop every capability, bounding set and ambient too; no_new_privs)
 *       → /proc/self/fd/9  (the loader: a fresh session keyring, the syscall filter)
 *       → sh -c INIT  (still PID 1, now unprivileged: reads the environment from fd 3, runs the
 *                      server as its child, reaps orphans, exits with the server's status)
 *         └ server  (or the egress forwarder, which starts the server once it listens)
 *
 * Nothing variable is spliced into the scripts unquoted: paths are single-quoted, and the server's
 * command and arguments travel as positional parameters ("$@"), never as script text.
 */

export interface Tools {
  setpriv: string;
  unshare: string;
  sh: string;
  mount: string;
  umount: string;
  pivotRoot: string;
  prlimit: string;
  cp: string;
  /** iproute2's `ip`, needed only to bring loopback up for an allow-list. */
  ip?: string;
  /** Either loads the syscall filter (seccomp.ts). */
  perl?: string;
  python3?: string;
  /** Lists the shared libraries of what a sandbox runs (dependencies.ts), which are all of /usr it sees. */
  ldd?: string;
}

export interface LaunchLimits {
  cpuSeconds: number;
  pids: number;
  tmpBytes: number;
  /** RLIMIT_NOFILE per process (soft and hard). */
  openFiles: number;
  /** RLIMIT_DATA per process, used when no memory cgroup bounds the sandbox as a whole. */
  dataBytes?: number;
}

export interface LaunchInput {
  tools: Tools;
  /**
   * Become this host user (as uid and gid) first, when the runtime runs as root; otherwise stay the
   * current user. Inside, either is mapped to {@link SANDBOX_ID}.
   */
  switchUser?: number;
  marker: string;
  /**
   * As root: the fstab that lends paths the sandbox user cannot reach (root.ts `lendingFstab`),
   * applied in a mount namespace of the chain's own before the user switch.
   */
  lendingFstab?: string;
  fstab: string;
  /** Host path of the skeleton, where the root is mounted. */
  root: string;
  /** An empty host directory the root's tmpfs is first mounted on (see the fstab's first line). */
  staging: string;
  cwd: string;
  /** `cgroup.procs` files to join (at most 5: they are held on fds 4 to 8 meanwhile). */
  cgroupProcs: readonly string[];
  /**
   * `/proc/sys/user/max_*_namespaces` files to set to 0 inside the sandbox's user namespace: no
   * nested namespaces, so the sandbox cannot reach the kernel code that an unprivileged user
   * namespace opens up (the main attack surface left without a seccomp filter).
   */
  namespaceLimits: readonly string[];
  limits: LaunchLimits;
  /** True when the kernel pipes core dumps to a helper (core_pattern starts with `|`). */
  coreToPipe: boolean;
  /** Node and the forwarder's port, when the sandbox has an allow-list. */
  egress?: { node: string; port: number };
  /**
   * The interpreter that installs the syscall filter (a host path, opened before the host's root goes
   * and run from the descriptor, so it is never mounted inside) and its arguments.
   */
  syscallFilter?: { interpreter: string; args: readonly string[] };
  command: string;
  args: readonly string[];
}

/** Single-quotes `value` for sh. */
export const shellQuote = (value: string): string => `'${value.replace(/'/g, `'\\''`)}'`;

/** The descriptor the syscall filter's loader is opened on; the loader closes it. */
const LOADER_FD = 9;
/** What the init writes on fd 3 once the sandbox is set up, before it reads the environment. */
export const READY_SIGNAL = 'R';

/** The exit code of the setup script when a step fails; the step is named on stderr. */
export const SETUP_FAILED_EXIT = 125;
export const SETUP_FAILED_PREFIX = 'sigil-sandbox: setup failed:';

/**
 * Runs as PID 1 without privileges: says on fd 3 (a socket from the runtime) that the sandbox is set
 * up, reads the environment from it (never a file; sockets cannot be reopened through /dev/fd, hence
 * `read` rather than `.`), then runs the server as its child and exits with its status. Its own
 * variables are named so that no environment name can collide with them (the spec schema refuses the
 * prefix).
 */
const INIT = [
  'unset PWD OLDPWD',
  `printf ${READY_SIGNAL} >&3`,
  '__sigil_env=',
  'while IFS= read -r __sigil_line <&3 || [ -n "$__sigil_line" ]; do __sigil_env="$__sigil_env$__sigil_line\n"; done',
  'exec 3<&-',
  'set -a',
  'eval "$__sigil_env"',
  'set +a',
  'unset __sigil_env __sigil_line',
  '"$@"',
  'exit "$?"',
].join('\n');

export function setupScript(input: LaunchInput): string {
  const q = shellQuote;
  const { tools, limits } = input;
  const step = (command: string, what: string) => `${command} || fail ${q(what)}`;
  const loader = input.syscallFilter
    ? `/proc/self/fd/${LOADER_FD} ${input.syscallFilter.args.map(q).join(' ')} `
    : '';
  const dropPrivileges = `${q(tools.setpriv)} --inh-caps=-all --bounding-set=-all --no-new-privs -- ${loader}${q(tools.sh)} -c ${q(INIT)} "$0" "$@"`;
  // SIGXCPU at the soft CPU limit says why the process ended; the hard limit (SIGKILL) backs it up.
  const cpu = { soft: limits.cpuSeconds, hard: limits.cpuSeconds + 1 };
  const last = input.coreToPipe
    ? [
        // A core_pattern pipe helper ignores RLIMIT_CORE except for the value 1 (byte), which stops
        // it; only prlimit sets byte values. Without a pipe, 0 stops core files and the shell's own
        // ulimit saves an exec. Either way a crash cannot write the process's secrets to disk.
        `exec ${q(tools.prlimit)} --core=1 --nproc=${limits.pids} --cpu=${cpu.soft}:${cpu.hard} --fsize=${limits.tmpBytes} --nofile=${limits.openFiles}${
          limits.dataBytes === undefined ? '' : ` --data=${limits.dataBytes}`
        } -- ${dropPrivileges}`,
      ]
    : [
        step(
          [
            'ulimit -c 0',
            `ulimit -p ${limits.pids}`,
            // Soft first: a hard limit below the current soft one is refused.
            `ulimit -S -t ${cpu.soft}`,
            `ulimit -H -t ${cpu.hard}`,
            // dash counts file sizes in 512-byte blocks and data in KiB.
            `ulimit -f ${Math.floor(limits.tmpBytes / 512)}`,
            `ulimit -n ${limits.openFiles}`,
            ...(limits.dataBytes === undefined ? [] : [`ulimit -d ${Math.floor(limits.dataBytes / 1024)}`]),
          ].join(' && '),
          'setting rlimits',
        ),
        `exec ${dropPrivileges}`,
      ];
  return [
    `fail() { echo "${SETUP_FAILED_PREFIX} $1" >&2; exit ${SETUP_FAILED_EXIT}; }`,
    ...input.namespaceLimits.map((file) => step(`echo 0 > ${q(file)}`, `cannot set ${file}`)),
    // Joining a cgroup waits for an RCU grace period (about 10 ms): a background job moves this
    // shell ($$, PID 1 here) in while the mounts proceed, and nothing of the server starts before the
    // `wait` below says it is in (only the short-lived mount helpers may run outside meanwhile). The
    // files are opened first, on fds 4 and up, since their paths vanish with the host root.
    ...(input.cgroupProcs.length > 0
      ? [
          step(
            `exec ${input.cgroupProcs.map((file, i) => `${i + 4}>${q(file)}`).join(' ')}`,
            'opening the cgroups',
          ),
          `{ ${input.cgroupProcs.map((_, i) => `echo "$$" >&${i + 4}`).join(' && ')}; } & __sigil_cgroups=$!`,
        ]
      : []),
    // The skeleton is copied onto a tmpfs, which the fstab then binds read-only over the skeleton:
    // bound from the host, the root's line in /proc/self/mountinfo would name the skeleton's host
    // path; a tmpfs of its own names '/'.
    step(
      `${q(tools.mount)} -n -t tmpfs -o mode=755,size=1m,nr_inodes=4096 sigil ${q(input.staging)} && ${q(tools.cp)} -PR ${q(`${input.root}/.`)} ${q(input.staging)}`,
      'building the sandbox root',
    ),
    step(`${q(tools.mount)} -n -a -T ${q(input.fstab)}`, 'mounting the sandbox root'),
    ...(input.egress && tools.ip ? [step(`${q(tools.ip)} link set lo up`, 'bringing loopback up')] : []),
    ...(input.syscallFilter
      ? [step(`exec ${LOADER_FD}<${q(input.syscallFilter.interpreter)}`, 'opening the syscall filter loader')]
      : []),
    step(`cd ${q(input.root)}`, 'entering the sandbox root'),
    step(`${q(tools.pivotRoot)} . .oldroot`, 'pivot_root'),
    // -n: no utab bookkeeping (nothing to write, and umount refuses otherwise without real root).
    step(`${q(tools.umount)} -n -l /.oldroot`, 'detaching the host root'),
    step(`cd ${q(input.cwd)}`, `working directory ${input.cwd}`),
    // cd exported both; OLDPWD is the skeleton's host path, which would stay in PID 1's environ.
    'unset PWD OLDPWD',
    ...(input.cgroupProcs.length > 0
      ? [
          step('wait "$__sigil_cgroups"', 'cannot join the cgroups'),
          `exec ${input.cgroupProcs.map((_, i) => `${i + 4}>&-`).join(' ')}`,
        ]
      : []),
    ...last,
  ].join('\n');
}

/**
 * The chain the runtime spawns: the user switch, preceded, when
 * paths are lent, by their binds in a mount namespace made as root. The sandbox's own namespaces are
 * made from that one, so it sees the lent binds, and the host's mount table never does.
 */
export function launchCommand(input: LaunchInput): string[] {
  const chain = [input.tools.setpriv, ...setprivArgs(input)];
  if (input.lendingFstab === undefined) return chain;
  const lend = `${shellQuote(input.tools.mount)} -n -a -T ${shellQuote(input.lendingFstab)} || { echo "${SETUP_FAILED_PREFIX} lending paths the sandbox user cannot reach" >&2; exit ${SETUP_FAILED_EXIT}; }
exec "$@"`;
  return [input.tools.unshare, '--mount', '--', input.tools.sh, '-c', lend, input.marker, ...chain];
}

/** Arguments of the `setpriv` that switches to the sandbox user. */
function setprivArgs(input: LaunchInput): string[] {
  const { tools } = input;
  const user =
    input.switchUser === undefined
      ? []
      : ['--reuid', String(input.switchUser), '--regid', String(input.switchUser), '--clear-groups'];
  const server = input.egress
    ? [
        input.egress.node,
        EGRESS_FORWARDER,
        String(input.egress.port),
        EGRESS_SOCKET,
        input.command,
        ...input.args,
      ]
    : [input.command, ...input.args];
  return [
    ...user,
    '--pdeathsig',
    'SIGKILL',
    '--',
    tools.unshare,
    `--map-user=${SANDBOX_ID}`,
    `--map-group=${SANDBOX_ID}`,
    // Ambient capabilities carry the namespace's capabilities across exec into the (non-root) setup
    // shell and mount; the final setpriv drops them before anything of the server runs.
    '--keep-caps',
    '--mount',
    '--net',
    '--pid',
    '--ipc',
    '--uts',
    '--fork',
    '--kill-child=SIGKILL',
    '--',
    tools.sh,
    '-c',
    setupScript(input),
    input.marker,
    ...server,
  ];
}

/** The script sourced from fd 3: one `NAME='value'` line per variable (names are checked beforehand). */
export function environmentScript(env: Readonly<Record<string, string>>): string {
  return Object.entries(env)
    .map(([name, value]) => `${name}=${shellQuote(value)}\n`)
    .join('');
}
