import { isAbsolute } from 'node:path';
import { z } from 'zod';
import { parseRange } from '@sigil/plugin-api/egress';
import {
  DEFAULT_SANDBOX_LIMITS,
  type EnforcedSandboxLimits,
  sandboxLimitsSchema,
} from '@sigil/plugin-api/sandbox';

/** The plugin's options (README.md lists them) and the limits a container runs under. */

export const limitsSchema = sandboxLimitsSchema;

export type ContainerLimits = EnforcedSandboxLimits;

export const DEFAULT_LIMITS: ContainerLimits = DEFAULT_SANDBOX_LIMITS;

export const absolutePath = z.string().refine(isAbsolute, 'must be an absolute path');

/**
 * An image as the engine names it: a local tag (`sigil/node:20`) or `repository@sha256:<hex>`. A
 * tag is the operator's own choice of what runs host programs; images that registries hand out are
 * always pinned by digest (launch.ts).
 */
const imageReference = z
  .string()
  .regex(
    /^[a-z0-9][a-z0-9._\-/:]*(@sha256:[0-9a-f]{64})?$/,
    'must be an image reference (name[:tag][@sha256:…])',
  );

/**
 * Where the engine is. Nothing given: `DOCKER_HOST` (with `DOCKER_TLS_VERIFY`/`DOCKER_CERT_PATH`)
 * when set, else `/var/run/docker.sock`. `host` (with `port`) is a remote engine over TCP, TLS when
 * `ca`, `cert` and `key` (PEM files) are given.
 */
const engineSchema = z
  .object({
    socketPath: absolutePath.optional().describe('unix socket of a local engine'),
    host: z.string().min(1).optional().describe('host of a remote engine (TCP)'),
    port: z.number().int().min(1).max(65535).optional().describe('its port: 2376 with TLS, 2375 without'),
    ca: absolutePath.optional().describe("PEM file of the CA that signed the engine's certificate"),
    cert: absolutePath.optional().describe("PEM file of this client's certificate"),
    key: absolutePath.optional().describe("PEM file of this client's key"),
    /** How long an API call other than a pull or a container's own attach/wait may take. */
    timeoutMs: z
      .number()
      .int()
      .positive()
      .default(30_000)
      .describe('longest an API call may take (not pulls, attach or wait)'),
  })
  .strict()
  .refine((engine) => !(engine.socketPath && engine.host), 'give either socketPath or host, not both')
  .refine(
    (engine) => [engine.ca, engine.cert, engine.key].every((file) => file === undefined) || engine.host,
    'ca, cert and key go with host (a TCP engine)',
  )
  .refine(
    (engine) =>
      [engine.ca, engine.cert, engine.key].every((file) => file === undefined) ||
      [engine.ca, engine.cert, engine.key].every((file) => file !== undefined),
    'TLS needs all of ca, cert and key',
  );

export type EngineConfig = z.infer<typeof engineSchema>;

export const configSchema = z
  .object({
    engine: engineSchema.prefault({}),
    /**
     * Images that run host programs (a HostLaunch), by runtime: the install root is bind-mounted
     * read-only at its own path into it and run by its `node` or `python3` (on the image's PATH), or
     * for `binary` as it is. A runtime without an image here is not offered (`status().runs.host`).
     */
    images: z
      .object({
        node: imageReference.describe('image whose `node` runs Node host programs'),
        python: imageReference.describe('image whose `python3` runs Python host programs'),
        binary: imageReference.describe('image that runs binary host programs'),
      })
      .partial()
      .strict()
      .default({}),
    /**
     * The OCI runtime the engine runs containers with: `runc` (the engine's default) or another it
     * has registered, e.g. `runsc` (gVisor: `dockerd --add-runtime runsc=/usr/bin/runsc`).
     */
    runtime: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/)
      .default('runc')
      .describe('OCI runtime registered with the engine: runc, or runsc (gVisor)'),
    /**
     * `strict`: this plugin's profile (seccomp-profile.ts: the engine's defaults for what it does not
     * name, ptrace, mount, namespaces, keyring, bpf, … refused, other ABIs killed); `engine`: the
     * engine's own default profile (it allows ptrace and 32-bit calls); or a profile file of the
     * engine's JSON format.
     */
    seccomp: z
      .union([z.enum(['strict', 'engine']), absolutePath])
      .default('strict')
      .describe("strict (this plugin's), engine (its default), or a profile file"),
    /**
     * How the spec's environment (secrets) reaches the server. `stdin`: written on the container's
     * stdin before anything else and exported by a `/bin/sh` of the image, so neither the engine's
     * `inspect` nor its disk ever holds it (a server whose image has no `/bin/sh` cannot get one);
     * `env`: as the container's Env (shown by `docker inspect` of that container, kept in the
     * engine's state on disk).
     */
    secretDelivery: z
      .enum(['stdin', 'env'])
      .default('stdin')
      .describe("stdin: never in inspect nor on the engine's disk; env: the container's Env"),
    /**
     * How stdio reaches a container. `auto`: through named pipes bound into it when the engine is
     * local, the runtime not gVisor and the image has `/bin/sh` (a warm call then costs about what
     * it costs with a plain process), else through the engine's attach; `attach`: always the
     * engine's attach.
     */
    stdio: z
      .enum(['auto', 'attach'])
      .default('auto')
      .describe("auto: named pipes where possible, else the engine's attach"),
    /**
     * Host uids (each also the gid) for containers: each live container holds one no other live
     * container of any gateway on this engine holds. Must be no one else's on the engine's host, and
     * disjoint from the linux-namespaces sandbox's range when both run on one host.
     */
    uidRange: z
      .object({ first: z.number().int().min(1000), count: z.number().int().min(1) })
      .strict()
      .refine((range) => range.first + range.count - 1 <= 0xfffffffe, 'the range must end below 4294967295')
      .default({ first: 0x70010000, count: 65536 })
      .describe('host uids for containers, one per live container'),
    limits: limitsSchema.partial().prefault({}),
    /** CPUs' worth of time a container may use at once. */
    cpus: z.number().positive().default(1).describe("CPUs' worth of time a container may use"),
    /**
     * Run an init as PID 1, which reaps orphans: the image's `/bin/sh` (env-wrapper.ts), or the
     * engine's tini for an image without one. Off, the server is PID 1.
     */
    init: z.boolean().default(true).describe("an init as PID 1: the image's sh, else the engine's tini"),
    /** How long `kill()` waits after closing stdin before it kills the container. */
    killGraceMs: z
      .number()
      .int()
      .nonnegative()
      .default(1000)
      .describe('wait after closing stdin before the container is killed'),
    /** Longest an image pull may take before the spawn fails. */
    pullTimeoutMs: z.number().int().positive().default(300_000).describe('longest a pull may take'),
    /** Egress sockets of allow-listed containers (on this host, which must be the engine's). */
    stateDir: absolutePath
      // <dir>/<pid ns>.<pid>.<start>.<instance>/<sandbox>/egress/sock must fit a unix socket's 107 bytes.
      .refine(
        (dir) => Buffer.byteLength(dir) <= 32,
        'must be at most 32 bytes long (unix socket paths live under it)',
      )
      .default('/tmp/sigil-docker')
      .describe(
        "stdio pipes and egress sockets (at most 32 bytes); this process's own, on the engine's host",
      ),
    egress: z
      .object({
        /** The image of the forwarder container (runs `node`); `images.node` when absent. */
        image: imageReference.optional().describe('image of the egress forwarder (images.node when absent)'),
        /** Port of the forwarder on the container's loopback (HTTP_PROXY). */
        proxyPort: z
          .number()
          .int()
          .min(1)
          .max(65535)
          .default(3128)
          .describe("port of the forwarder on the container's loopback"),
        headerTimeoutMs: z
          .number()
          .int()
          .positive()
          .default(10_000)
          .describe('request head and upstream within this'),
        idleTimeoutMs: z
          .number()
          .int()
          .positive()
          .default(300_000)
          .describe('a tunnel idle this long is closed'),
        /** Private or other special ranges (CIDR) an allowed host name may resolve to; none by default. */
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

export type DockerSandboxConfig = z.infer<typeof configSchema>;
