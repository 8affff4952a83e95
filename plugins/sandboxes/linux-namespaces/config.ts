import { isAbsolute } from 'node:path';
import { z } from 'zod';
import { parseRange } from '@sigil/plugin-api/egress';
import { sandboxLimitsSchema } from '@sigil/plugin-api/sandbox';
import { DEFAULT_UID_RANGE, uidRangeSchema } from './uids.ts';

/** The plugin's options (README.md lists them); its limits are the plugin API's (`sandboxLimitsSchema`). */

export const absolutePath = z.string().refine(isAbsolute, 'must be an absolute path');

/**
 * Host files every sandbox sees besides the programs it runs and their libraries (which the runtime
 * finds itself); missing entries are skipped. Not /usr: a server sees no compiler, shell tool or
 * document of the host that it was not given.
 */
export const DEFAULT_SYSTEM_PATHS = ['/etc/ld.so.cache', '/etc/localtime'];

export const configSchema = z
  .object({
    /** Per-run state (sandbox roots, fstabs, egress sockets); must be traversable by the sandbox user. */
    stateDir: absolutePath.default('/tmp/sigil-sandboxes'),
    /**
     * Host uids (and gids) for sandboxes when the runtime is root: each live sandbox holds one of its
     * own; it must be no one else's on this host. Not root: every sandbox runs as the runtime's user.
     */
    uidRange: uidRangeSchema.default(DEFAULT_UID_RANGE),
    /**
     * The syscall filter (seccomp.ts; installed by perl or python3 of the host): `auto` when the host
     * allows it, else none and `status()` says why; `seccomp`: start-up fails without it; `off`: none.
     */
    syscallFilter: z.enum(['auto', 'seccomp', 'off']).default('auto'),
    /**
     * The python3 that runs `python` launches: a path (a launcher such as a pyenv shim will do: the
     * runtime asks it for the real interpreter); by default `python3` on the runtime's PATH, and
     * without one Python servers cannot run here (`status().runs.host` says so).
     */
    python: absolutePath.optional(),
    limits: sandboxLimitsSchema.partial().prefault({}),
    /** `auto`: per-sandbox cgroup v1 limits when available (root, v1 hierarchy); `off`: rlimits only. */
    cgroups: z.enum(['auto', 'off']).default('auto'),
    /** CPUs' worth of time a sandbox may use at once (cgroup only). */
    cpuQuota: z.number().positive().default(1),
    /**
     * The share (0–1) of one period's quota a sandbox banks while it uses less, to spend above its
     * quota at once (cgroup v1 `cpu.cfs_burst_us`, Linux 5.14 on; older kernels ignore it): a server's
     * start runs several threads at once, which a quota of 1 throttles by ~50 ms, while its use over
     * time stays within `cpuQuota`. 0: no burst.
     */
    cpuBurst: z.number().min(0).max(1).default(1),
    systemPaths: z.array(absolutePath).default(DEFAULT_SYSTEM_PATHS),
    /** Further host paths every sandbox sees read-only. */
    readOnlyPaths: z.array(absolutePath).default([]),
    /**
     * Sandboxes built ahead of need (spares.ts): when a sandbox ends, one for the same server (all but
     * its environment) is set up and left waiting before the server runs, so that server's next start
     * skips the setup. `count` spares at most, each kept `keepSeconds` unused; `count` 0: none.
     */
    spares: z
      .object({
        count: z.number().int().min(0).max(256).default(4),
        keepSeconds: z.number().int().positive().default(600),
      })
      .strict()
      .prefault({}),
    /** How long `kill()` waits after closing stdin before it kills the sandbox. */
    killGraceMs: z.number().int().nonnegative().default(1000),
    /** Port of the egress forwarder on the sandbox's own loopback (HTTP_PROXY). */
    proxyPort: z.number().int().min(1).max(65535).default(3128),
    /** Timers of the egress proxy (the connection cap is `limits.egressConnections`). */
    egress: z
      .object({
        /** From a connection's accept until its tunnel is up: request head read, upstream connected. */
        headerTimeoutMs: z.number().int().positive().default(10_000),
        /** A tunnel with no traffic either way for this long is closed. */
        idleTimeoutMs: z.number().int().positive().default(300_000),
        /**
         * Private, loopback, link-local and other special ranges (CIDR) an allowed host name may
         * resolve to; by default none (an allow-list entry that is itself an address is always kept).
         */
        privateRanges: z
          .array(
            z.string().refine((value) => parseRange(value) !== undefined, 'must be an address or CIDR range'),
          )
          .default([]),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type LinuxNamespacesConfig = z.infer<typeof configSchema>;
