/**
 * The sandbox's syscall filter: a classic-BPF seccomp program, installed last in the launch chain
 * (launch.ts), inside the sandbox's root once every capability is dropped, right before the init that
 * runs the server, since the chain itself needs what the server must not have (unshare, mount,
 * pivot_root). It refuses (EPERM) what a server never needs and what opens the kernel's larger attack
 * surface ({@link SERVER_DENIED}) and `clone` with any CLONE_NEW* flag (the flags argument is
 * inspected; threads and fork stay allowed), answers `clone3` with ENOSYS (its flags sit in memory BPF
 * cannot read; libc then falls back to `clone`, as under Docker's profile), and kills a process that
 * makes a system call through any other ABI than the host's own: the i386 one (`int 0x80`, which
 * reports another audit arch) and, on x86_64, the x32 numbering (bit 30 set), since a filter keyed on
 * the host's numbers would not see those calls.
 *
 * util-linux has no seccomp tool and node cannot make the calls, so a few lines of perl (perl-base is
 * Essential in Debian; about 2 ms of CPU) or, without perl, python3 with ctypes (about 10 ms more)
 * install it: they close every descriptor but stdio and the environment's, give the process a fresh,
 * empty session keyring (nothing of the runtime's keyrings is possessed inside), set no_new_privs,
 * install the filter and exec the init, which inherits it for good. The interpreter is never mounted
 * in the sandbox: the chain opens it on fd 9 while the host's root is still in view and execs it as
 * /proc/self/fd/9; only its libraries (and python3's standard library) are mounted.
 */

/** Calls the filter refuses with EPERM, besides `clone` with namespace flags. */
export const SERVER_DENIED = [
  'ptrace',
  'process_vm_readv',
  'process_vm_writev',
  'mount',
  'umount2',
  'pivot_root',
  // The new mount API: mount by other names.
  'open_tree',
  'move_mount',
  'fsopen',
  'fsconfig',
  'fsmount',
  'fspick',
  'mount_setattr',
  'add_key',
  'request_key',
  'keyctl',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'kexec_load',
  'kexec_file_load',
  'init_module',
  'finit_module',
  'delete_module',
  'unshare',
  'setns',
  // A large, often exploited surface that libuv only uses when it is there.
  'io_uring_setup',
  'io_uring_enter',
  'io_uring_register',
] as const;

/** Answered ENOSYS, as if the kernel lacked them, so that libc falls back to what the filter can judge. */
const SERVER_ENOSYS = ['clone3'] as const;
/** How `status()` names the one call refused by its arguments. */
export const CLONE_NEW_NAMESPACE = 'clone with CLONE_NEW* flags';

type SyscallName = (typeof SERVER_DENIED)[number] | (typeof SERVER_ENOSYS)[number] | 'clone';

/** The host's ABI as seccomp sees it: its audit arch and the numbers of the calls the filter names. */
interface Abi {
  name: string;
  auditArch: number;
  /** Set on x86_64 only: numbers at or above it are the x32 ABI. */
  x32Bit?: number;
  syscalls: Readonly<Record<SyscallName, number>>;
  prctl: number;
}

/** close_range(2), the same number on both ABIs. */
const CLOSE_RANGE = 436;

/** Numbers the two ABIs share (asm-generic/unistd.h and x86_64's table agree on these). */
const SHARED = {
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  mount_setattr: 442,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  clone3: 435,
};

/** From the kernel's uapi (linux/audit.h, asm/unistd_64.h, asm-generic/unistd.h). */
const ABIS: Readonly<Record<string, Abi>> = {
  x64: {
    name: 'x86_64',
    auditArch: 0xc000003e,
    x32Bit: 0x40000000,
    syscalls: {
      ...SHARED,
      ptrace: 101,
      process_vm_readv: 310,
      process_vm_writev: 311,
      mount: 165,
      umount2: 166,
      pivot_root: 155,
      add_key: 248,
      request_key: 249,
      keyctl: 250,
      bpf: 321,
      perf_event_open: 298,
      userfaultfd: 323,
      kexec_load: 246,
      kexec_file_load: 320,
      init_module: 175,
      finit_module: 313,
      delete_module: 176,
      unshare: 272,
      setns: 308,
      clone: 56,
    },
    prctl: 157,
  },
  arm64: {
    name: 'aarch64',
    auditArch: 0xc00000b7,
    syscalls: {
      ...SHARED,
      ptrace: 117,
      process_vm_readv: 270,
      process_vm_writev: 271,
      mount: 40,
      umount2: 39,
      pivot_root: 41,
      add_key: 217,
      request_key: 218,
      keyctl: 219,
      bpf: 280,
      perf_event_open: 241,
      userfaultfd: 282,
      kexec_load: 104,
      kexec_file_load: 294,
      init_module: 105,
      finit_module: 273,
      delete_module: 106,
      unshare: 97,
      setns: 268,
      clone: 220,
    },
    prctl: 167,
  },
};

// linux/filter.h, linux/seccomp.h, linux/sched.h, asm-generic/errno*.h
const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;
const SECCOMP_DATA_NR = 0;
const SECCOMP_DATA_ARCH = 4;
/** The low 32 bits of args[0] on a little-endian host (both ABIs here): clone's flags. */
const SECCOMP_DATA_ARG0_LOW = 16;
const SECCOMP_RET_KILL_PROCESS = 0x80000000;
const SECCOMP_RET_ERRNO = 0x00050000;
const SECCOMP_RET_ALLOW = 0x7fff0000;
const EPERM = 1;
const ENOSYS = 38;
/**
 * CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET. (CLONE_NEWTIME, 0x80, exists
 * for unshare and clone3 only: in clone's flags that bit is part of the exit signal.)
 */
const CLONE_NEW_FLAGS = 0x7e020000;

/** What the filter enforces, as `status()` reports it. */
export interface SyscallFilterStatus {
  enforced: true;
  arch: string;
  /** What the server's filter refuses: EPERM, or ENOSYS for those in {@link enosys}. */
  denied: readonly string[];
  /** Answered ENOSYS, so that libc falls back to a call the filter can judge (clone3 → clone). */
  enosys: readonly string[];
  /** Calls through another ABI (i386 `int 0x80`, x32) kill the process. */
  otherAbis: 'killed';
  /** Every sandbox starts with a fresh, empty session keyring. */
  keyring: 'fresh-session';
  /** The interpreter that installs it. */
  loader: FilterInterpreter;
}

export type FilterInterpreter = 'perl' | 'python3';

export interface SyscallFilter {
  status: SyscallFilterStatus;
  /** The interpreter's host path. */
  interpreter: string;
  /** Its arguments (after its own path) that install the filter and then exec the arguments that follow. */
  loaderArgs: string[];
}

/**
 * The filter for this host's architecture, loaded by `interpreter` (its path), or undefined where the
 * runtime has no syscall table for the architecture.
 */
export function syscallFilter(
  interpreter: { name: FilterInterpreter; path: string },
  arch: string = process.arch,
): SyscallFilter | undefined {
  const abi = ABIS[arch];
  if (!abi) return undefined;
  const args = [
    program(abi).toString('hex'),
    String(abi.syscalls.keyctl),
    String(abi.prctl),
    String(CLOSE_RANGE),
  ];
  return {
    status: {
      enforced: true,
      arch: abi.name,
      denied: [...SERVER_DENIED, CLONE_NEW_NAMESPACE, ...SERVER_ENOSYS],
      enosys: [...SERVER_ENOSYS],
      otherAbis: 'killed',
      keyring: 'fresh-session',
      loader: interpreter.name,
    },
    interpreter: interpreter.path,
    loaderArgs:
      interpreter.name === 'perl'
        ? ['-e', PERL_LOADER, '--', ...args]
        : ['-I', '-S', '-c', PYTHON_LOADER, ...args],
  };
}

type Label = 'next' | 'deny' | 'enosys' | 'kill' | 'clone';
interface Step {
  code: number;
  k: number;
  jt?: Label;
  jf?: Label;
  /** Where a jump to this label lands. */
  label?: Label;
}

/**
 *   ld arch; jeq <host arch> ? next : kill
 *   ld nr;   [x86_64: jge x32 bit ? kill : next]
 *   jeq clone ? clone : next
 *   jeq <each ENOSYS call> ? enosys : next
 *   jeq <each denied call> ? deny : next
 *   ret ALLOW
 *   clone: ld args[0]; jset CLONE_NEW* ? deny : next; ret ALLOW
 *   deny:   ret ERRNO(EPERM);  enosys: ret ERRNO(ENOSYS);  kill: ret KILL_PROCESS
 */
function program(abi: Abi): Buffer {
  const steps: Step[] = [
    { code: BPF_LD_W_ABS, k: SECCOMP_DATA_ARCH },
    { code: BPF_JEQ_K, k: abi.auditArch, jt: 'next', jf: 'kill' },
    { code: BPF_LD_W_ABS, k: SECCOMP_DATA_NR },
    ...(abi.x32Bit === undefined ? [] : [{ code: BPF_JGE_K, k: abi.x32Bit, jt: 'kill', jf: 'next' } as Step]),
    { code: BPF_JEQ_K, k: abi.syscalls.clone, jt: 'clone', jf: 'next' },
    ...SERVER_ENOSYS.map((name): Step => ({
      code: BPF_JEQ_K,
      k: abi.syscalls[name],
      jt: 'enosys',
      jf: 'next',
    })),
    ...SERVER_DENIED.map((name): Step => ({
      code: BPF_JEQ_K,
      k: abi.syscalls[name],
      jt: 'deny',
      jf: 'next',
    })),
    { code: BPF_RET_K, k: SECCOMP_RET_ALLOW },
    { code: BPF_LD_W_ABS, k: SECCOMP_DATA_ARG0_LOW, label: 'clone' },
    { code: BPF_JSET_K, k: CLONE_NEW_FLAGS, jt: 'deny', jf: 'next' },
    { code: BPF_RET_K, k: SECCOMP_RET_ALLOW },
    { code: BPF_RET_K, k: SECCOMP_RET_ERRNO | EPERM, label: 'deny' },
    { code: BPF_RET_K, k: SECCOMP_RET_ERRNO | ENOSYS, label: 'enosys' },
    { code: BPF_RET_K, k: SECCOMP_RET_KILL_PROCESS, label: 'kill' },
  ];
  const at = new Map(steps.flatMap((step, index) => (step.label ? [[step.label, index] as const] : [])));
  const buffer = Buffer.alloc(steps.length * 8);
  steps.forEach((step, index) => {
    // Jumps are relative to the next instruction, and only forward.
    const offset = (jump: Label | undefined) => {
      if (jump === undefined || jump === 'next') return 0;
      const target = at.get(jump);
      if (target === undefined || target <= index) throw new Error(`seccomp program: bad jump to ${jump}`);
      return target - index - 1;
    };
    buffer.writeUInt16LE(step.code, index * 8);
    buffer.writeUInt8(offset(step.jt), index * 8 + 2);
    buffer.writeUInt8(offset(step.jf), index * 8 + 3);
    buffer.writeUInt32LE(step.k >>> 0, index * 8 + 4);
  });
  return buffer;
}

/*
 * The two loaders do the same, in the same order; argv: <program hex> <keyctl nr> <prctl nr>
 * <close_range nr> <command> [args...]. A failure is reported as a setup failure (exit 125), and the
 * command is exec'd on an empty environment, as the chain runs.
 *   close_range(4, ~0): no descriptor but stdio and the environment's (fd 3) goes on, whatever the
 *   runtime's process inherited without close-on-exec, nor the loader's own fd 9; a kernel older
 *   than 5.9 answers ENOSYS, which changes nothing;
 *   KEYCTL_JOIN_SESSION_KEYRING (1) with no name: a new, empty, anonymous session keyring;
 *   PR_SET_NO_NEW_PRIVS (38), which PR_SET_SECCOMP (22) with SECCOMP_MODE_FILTER (2) needs unprivileged;
 *   the filter, as a struct sock_fprog { unsigned short len; struct sock_filter *filter; }.
 * perl opens /dev/null for an -e script, which every sandbox has.
 */
const PERL_LOADER = `
sub fail { print STDERR "sigil-sandbox: setup failed: $_[0]: $!\\n"; exit 125 }
my ($program, $keyctl, $prctl, $close_range) = (pack('H*', shift), shift, shift, shift);
syscall($close_range, 4, 0xffffffff, 0);
syscall($keyctl, 1, 0) != -1 or fail('joining a fresh session keyring');
syscall($prctl, 38, 1, 0, 0, 0) != -1 or fail('setting no_new_privs');
my $fprog = pack('S x![P] P', length($program) / 8, $program);
syscall($prctl, 22, 2, $fprog, 0, 0) != -1 or fail('installing the syscall filter');
%ENV = ();
exec { $ARGV[0] } @ARGV or fail("exec $ARGV[0]");
`;

/** With -I -S: no site packages, no PYTHON* variables, no user paths, not the working directory. */
const PYTHON_LOADER = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def ok(result, what):
    if result == -1:
        sys.stderr.write('sigil-sandbox: setup failed: %s: %s\\n' % (what, os.strerror(ctypes.get_errno())))
        sys.exit(125)
program, keyctl = bytes.fromhex(sys.argv[1]), int(sys.argv[2])
libc.syscall(int(sys.argv[4]), 4, ctypes.c_uint(0xffffffff), 0)
ok(libc.syscall(keyctl, 1, None), 'joining a fresh session keyring')
ok(libc.prctl(38, 1, 0, 0, 0), 'setting no_new_privs')
class Program(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_char_p)]
ok(libc.prctl(22, 2, ctypes.byref(Program(len(program) // 8, program)), 0, 0), 'installing the syscall filter')
# Not os.environ: python's start may have added LC_CTYPE to it.
os.execve(sys.argv[5], sys.argv[5:], {})
`;
