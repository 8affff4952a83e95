/**
 * The sandbox's syscall filter: a classic-BPF seccomp program that refuses the kernel keyring
 * (`add_key`, `request_key`, `keyctl` fail with EPERM) and kills a process that makes a system call
 * through any other ABI than the host's own (on x86_64: the i386 ABI, `int 0x80`, which reports
 * another audit arch, and the x32 numbering, bit 30 set), since a filter keyed on x86_64 numbers would
 * not see those calls. util-linux has no seccomp tool and node cannot make the calls, so the filter is
 * installed by a few lines of perl (perl-base is Essential in Debian; about 1 ms) or, without perl,
 * python3 with ctypes (about 8 ms more per start), run first in the launch chain, on the host: they
 * also give the process a fresh, empty session keyring (nothing of the runtime's keyrings is
 * possessed inside), set no_new_privs, install the filter and exec the rest of the chain, which
 * inherits the filter for good.
 */

/** The host's ABI as seccomp sees it: its audit arch and the numbers of the calls the filter names. */
interface Abi {
  name: string;
  auditArch: number;
  /** Set on x86_64 only: numbers at or above it are the x32 ABI. */
  x32Bit?: number;
  syscalls: { add_key: number; request_key: number; keyctl: number };
  prctl: number;
}

/** From the kernel's uapi (linux/audit.h, asm/unistd_64.h, asm-generic/unistd.h). */
const ABIS: Readonly<Record<string, Abi>> = {
  x64: {
    name: 'x86_64',
    auditArch: 0xc000003e,
    x32Bit: 0x40000000,
    syscalls: { add_key: 248, request_key: 249, keyctl: 250 },
    prctl: 157,
  },
  arm64: {
    name: 'aarch64',
    auditArch: 0xc00000b7,
    syscalls: { add_key: 217, request_key: 218, keyctl: 219 },
    prctl: 167,
  },
};

// linux/filter.h, linux/seccomp.h
const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_RET_K = 0x06;
const SECCOMP_DATA_NR = 0;
const SECCOMP_DATA_ARCH = 4;
const SECCOMP_RET_KILL_PROCESS = 0x80000000;
const SECCOMP_RET_ERRNO = 0x00050000;
const SECCOMP_RET_ALLOW = 0x7fff0000;
const EPERM = 1;

/** What the filter enforces, as `status()` reports it. */
export interface SyscallFilterStatus {
  enforced: true;
  arch: string;
  /** Refused with EPERM. */
  denied: readonly string[];
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
  /** Command and arguments that install it and then exec the arguments that follow. */
  loader: string[];
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
  const args = [program(abi).toString('hex'), String(abi.syscalls.keyctl), String(abi.prctl)];
  return {
    status: {
      enforced: true,
      arch: abi.name,
      denied: Object.keys(abi.syscalls),
      otherAbis: 'killed',
      keyring: 'fresh-session',
      loader: interpreter.name,
    },
    loader:
      interpreter.name === 'perl'
        ? [interpreter.path, '-e', PERL_LOADER, '--', ...args]
        : [interpreter.path, '-I', '-S', '-c', PYTHON_LOADER, ...args],
  };
}

/**
 *   ld arch; jeq <host arch> ? next : kill
 *   ld nr;   [x86_64: jge x32 bit ? kill : next]
 *   jeq add_key / request_key / keyctl ? deny : next
 *   allow;   deny: errno EPERM;   kill: kill process
 */
function program(abi: Abi): Buffer {
  const denied = Object.values(abi.syscalls);
  type Jump = 'next' | 'deny' | 'kill';
  const steps: { code: number; k: number; jt?: Jump; jf?: Jump }[] = [
    { code: BPF_LD_W_ABS, k: SECCOMP_DATA_ARCH },
    { code: BPF_JEQ_K, k: abi.auditArch, jt: 'next', jf: 'kill' },
    { code: BPF_LD_W_ABS, k: SECCOMP_DATA_NR },
    ...(abi.x32Bit === undefined
      ? []
      : [{ code: BPF_JGE_K, k: abi.x32Bit, jt: 'kill' as Jump, jf: 'next' as Jump }]),
    ...denied.map((nr) => ({ code: BPF_JEQ_K, k: nr, jt: 'deny' as Jump, jf: 'next' as Jump })),
    { code: BPF_RET_K, k: SECCOMP_RET_ALLOW },
  ];
  const deny = steps.length;
  const kill = deny + 1;
  steps.push(
    { code: BPF_RET_K, k: SECCOMP_RET_ERRNO | EPERM },
    { code: BPF_RET_K, k: SECCOMP_RET_KILL_PROCESS },
  );
  const buffer = Buffer.alloc(steps.length * 8);
  steps.forEach((step, index) => {
    // Jumps are relative to the next instruction.
    const offset = (jump: Jump | undefined) =>
      jump === undefined || jump === 'next' ? 0 : (jump === 'deny' ? deny : kill) - index - 1;
    buffer.writeUInt16LE(step.code, index * 8);
    buffer.writeUInt8(offset(step.jt), index * 8 + 2);
    buffer.writeUInt8(offset(step.jf), index * 8 + 3);
    buffer.writeUInt32LE(step.k >>> 0, index * 8 + 4);
  });
  return buffer;
}

/*
 * The two loaders do the same, in the same order; argv: <program hex> <keyctl nr> <prctl nr> <command>
 * [args...]. A failure is reported as a setup failure (exit 125), and the chain is exec'd on an empty
 * environment, as the runtime started it.
 *   KEYCTL_JOIN_SESSION_KEYRING (1) with no name: a new, empty, anonymous session keyring;
 *   PR_SET_NO_NEW_PRIVS (38), which PR_SET_SECCOMP (22) with SECCOMP_MODE_FILTER (2) needs unprivileged;
 *   the filter, as a struct sock_fprog { unsigned short len; struct sock_filter *filter; }.
 */
const PERL_LOADER = `
sub fail { print STDERR "sigil-sandbox: setup failed: $_[0]: $!\\n"; exit 125 }
my ($program, $keyctl, $prctl) = (pack('H*', shift), shift, shift);
syscall($keyctl, 1, 0) != -1 or fail('joining a fresh session keyring');
syscall($prctl, 38, 1, 0, 0, 0) != -1 or fail('setting no_new_privs');
my $fprog = pack('S x![P] P', length($program) / 8, $program);
syscall($prctl, 22, 2, $fprog, 0, 0) != -1 or fail('installing the syscall filter');
%ENV = ();
exec { $ARGV[0] } @ARGV or fail("exec $ARGV[0]");
`;

/** With -I -S: no site packages, no PYTHON* variables, no user paths. */
const PYTHON_LOADER = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def ok(result, what):
    if result == -1:
        sys.stderr.write('sigil-sandbox: setup failed: %s: %s\\n' % (what, os.strerror(ctypes.get_errno())))
        sys.exit(125)
program, keyctl = bytes.fromhex(sys.argv[1]), int(sys.argv[2])
ok(libc.syscall(keyctl, 1, None), 'joining a fresh session keyring')
ok(libc.prctl(38, 1, 0, 0, 0), 'setting no_new_privs')
class Program(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_char_p)]
ok(libc.prctl(22, 2, ctypes.byref(Program(len(program) // 8, program)), 0, 0), 'installing the syscall filter')
# Not os.environ: python's start may have added LC_CTYPE to it.
os.execve(sys.argv[4], sys.argv[4:], {})
`;
