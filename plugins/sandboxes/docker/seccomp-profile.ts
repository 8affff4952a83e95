import { readFileSync } from 'node:fs';
import type { SandboxStatus } from '@sigil/plugin-api';
import { SigilError } from '@sigil/plugin-api';

/**
 * The syscall filter of every container, in the engine's seccomp profile format. `strict` is this
 * plugin's: it refuses what the sandbox contract names (and what gives a process the kernel's
 * attack surface it has no business with), and lists only the engine's native architecture, so a
 * call through another ABI (i386 `int 0x80`, the x32 numbering) meets the profile's bad-architecture
 * action: the kernel kills the process (SIGSYS). The engine's own default profile is an allow-list,
 * but it allows ptrace (kernels from 4.8) and every 32-bit call; which is why it is not the default
 * here. Without CAP_SYS_ADMIN and friends, most privileged calls fail either way; the filter closes
 * those that need no capability or reach kernel code before the check.
 */

const EPERM = 1;
const ENOSYS = 38;

/** Refused with EPERM. */
export const DENIED_SYSCALLS = [
  'ptrace',
  'process_vm_readv',
  'process_vm_writev',
  'mount',
  'umount2',
  'mount_setattr',
  'move_mount',
  'open_tree',
  'fsopen',
  'fsconfig',
  'fsmount',
  'fspick',
  'pivot_root',
  'chroot',
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
  'open_by_handle_at',
  'name_to_handle_at',
  'io_uring_setup',
  'io_uring_enter',
  'io_uring_register',
  'quotactl',
  'syslog',
  'acct',
  'swapon',
  'swapoff',
  'reboot',
  'settimeofday',
  'clock_settime',
  'clock_adjtime',
  'adjtimex',
  'iopl',
  'ioperm',
  'lookup_dcookie',
] as const;

/** The namespace flags of clone(2); a clone with any of them is refused (threads and forks are not). */
const CLONE_NAMESPACE_FLAGS = {
  CLONE_NEWCGROUP: 0x02000000,
  CLONE_NEWUTS: 0x04000000,
  CLONE_NEWIPC: 0x08000000,
  CLONE_NEWUSER: 0x10000000,
  CLONE_NEWPID: 0x20000000,
  CLONE_NEWNET: 0x40000000,
  CLONE_NEWNS: 0x00020000,
};

/** The engine's `Architecture` (uname -m) to the profile's name; other architectures get no strict profile. */
const NATIVE_ARCHITECTURES: Readonly<Record<string, string>> = {
  x86_64: 'SCMP_ARCH_X86_64',
  aarch64: 'SCMP_ARCH_AARCH64',
};

/**
 * The strict profile for an engine of `architecture`. Everything not named is allowed: an allow-list
 * of our own would break servers on every new system call a libc starts using, and what it would add
 * over this list is held back by the dropped capabilities. clone3 answers ENOSYS, so libc falls back
 * to clone, whose flags a filter can see (clone3's are behind a pointer).
 */
export function strictProfile(architecture: string): string {
  const arch = NATIVE_ARCHITECTURES[architecture];
  if (!arch) {
    throw new SigilError(
      'unavailable',
      `the strict seccomp profile knows no system call numbering for an engine on ${architecture}; set seccomp to "engine" or a profile file`,
      { details: { reason: 'seccomp_architecture' } },
    );
  }
  return JSON.stringify({
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: [arch],
    syscalls: [
      { names: [...DENIED_SYSCALLS], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      ...Object.values(CLONE_NAMESPACE_FLAGS).map((flag) => ({
        names: ['clone'],
        action: 'SCMP_ACT_ERRNO',
        errnoRet: EPERM,
        args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
      })),
    ],
  });
}

export type SyscallFilterStatus = SandboxStatus['syscallFilter'];

/** What the configured filter refuses, for `status()`; a profile file is described from its rules. */
export function syscallFilterStatus(seccomp: string): SyscallFilterStatus {
  if (seccomp === 'strict') {
    return {
      enforced: true,
      denied: [...DENIED_SYSCALLS, 'clone3', 'clone of new namespaces'],
      otherAbis: 'killed',
    };
  }
  if (seccomp === 'engine') {
    return {
      enforced: false,
      reason:
        "the engine's default profile is on, but it allows ptrace and 32-bit system calls, which the sandbox contract refuses (seccomp: 'strict' does)",
    };
  }
  return describeProfile(seccomp);
}

interface ProfileFile {
  defaultAction?: string;
  architectures?: string[];
  archMap?: { subArchitectures?: string[] }[];
  syscalls?: { names?: string[]; name?: string; action?: string; args?: unknown[] }[];
}

/** The refusals of an operator's profile, and whether it lets other ABIs through. */
function describeProfile(path: string): SyscallFilterStatus {
  const profile = JSON.parse(readProfile(path)) as ProfileFile;
  const refuses = (action: string | undefined) => action !== undefined && action !== 'SCMP_ACT_ALLOW';
  const denied = (profile.syscalls ?? [])
    .filter((rule) => refuses(rule.action))
    .flatMap((rule) =>
      (rule.names ?? (rule.name ? [rule.name] : [])).map((name) =>
        rule.args?.length ? `${name} (some arguments)` : name,
      ),
    );
  if (refuses(profile.defaultAction)) denied.unshift('everything the profile does not allow');
  const foreign =
    (profile.architectures ?? []).length > 1 ||
    (profile.archMap ?? []).some((entry) => (entry.subArchitectures ?? []).length > 0);
  if (foreign) {
    return {
      enforced: false,
      reason: `the profile ${path} lets calls through other ABIs (32-bit entry) in, which the sandbox contract refuses`,
    };
  }
  return { enforced: true, denied: [...new Set(denied)], otherAbis: 'killed' };
}

/** The profile text to hand the engine for `seccomp`; undefined for the engine's own default. */
export function profileFor(seccomp: string, architecture: string): string | undefined {
  if (seccomp === 'engine') return undefined;
  if (seccomp === 'strict') return strictProfile(architecture);
  return readProfile(seccomp);
}

function readProfile(path: string): string {
  try {
    const text = readFileSync(path, 'utf8');
    JSON.parse(text);
    return text;
  } catch (error) {
    throw new SigilError('config_invalid', `seccomp profile ${path}: ${(error as Error).message}`, {
      details: { reason: 'seccomp_profile' },
    });
  }
}
