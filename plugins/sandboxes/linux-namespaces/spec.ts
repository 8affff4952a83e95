import { realpathSync } from 'node:fs';
import { posix } from 'node:path';
import { z } from 'zod';
import { SigilError, type SandboxSpecV2 } from '@sigil/plugin-api';
import { type EnforcedSandboxLimits, sandboxLimitsSchema } from '@sigil/plugin-api/sandbox';
import { absolutePath } from './config.ts';
import type { PythonRuntime } from './detect-host.ts';
import { parseHostPort } from '@sigil/plugin-api/egress';
import { resolveExecutable } from './host.ts';

/** Shell variable names only; PPID is read-only in sh, and `__sigil_` names are the init script's own. */
const ENV_NAME = /^(?!PPID$|__sigil_)[A-Za-z_][A-Za-z0-9_]*$/;
const noNul = (value: string) => !value.includes('\0');

const envSchema = z
  .record(z.string(), z.string().refine(noNul, 'environment values cannot hold NUL'))
  .superRefine((env, ctx) => {
    for (const name of Object.keys(env)) {
      if (!ENV_NAME.test(name)) {
        ctx.addIssue({
          code: 'custom',
          path: [name],
          message: 'environment names must be shell identifiers, other than PPID and __sigil_*',
        });
      }
    }
  });

const inside = (root: string, path: string) =>
  root === '/' || posix.normalize(path).startsWith(`${posix.normalize(root).replace(/\/$/, '')}/`);

const hostLaunchSchema = z
  .object({
    kind: z.literal('host'),
    runtime: z.enum(['node', 'python', 'binary']),
    root: absolutePath,
    command: absolutePath.refine(noNul).optional(),
    args: z.array(z.string().refine(noNul, 'arguments cannot hold NUL')),
    cwd: absolutePath.optional(),
    readOnlyPaths: z.array(absolutePath).optional(),
    env: envSchema.optional(),
  })
  .superRefine((launch, ctx) => {
    if (launch.runtime === 'binary' && launch.command === undefined) {
      ctx.addIssue({ code: 'custom', path: ['command'], message: 'a binary launch names its command' });
    } else if (launch.runtime === 'binary' && !inside(launch.root, launch.command as string)) {
      ctx.addIssue({ code: 'custom', path: ['command'], message: 'must be inside launch.root' });
    } else if (launch.runtime !== 'binary' && launch.command !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['command'],
        message: `a ${launch.runtime} launch has none: the sandbox supplies the interpreter`,
      });
    }
  });

const specSchema = z.object({
  launch: hostLaunchSchema,
  env: envSchema,
  networkAllowList: z.array(
    z.string().refine((entry) => parseHostPort(entry) !== undefined, 'must be host:port'),
  ),
  limits: sandboxLimitsSchema.partial().optional(),
  labels: z.record(z.string(), z.string()).optional(),
});

/**
 * A host program as the launch chain runs it: a spec checked, its launch's interpreter (or binary)
 * resolved to a real file, its environment merged.
 */
export interface HostRun {
  /** The install root, mounted read-only at its own path. */
  root: string;
  /** The real path of what runs: the interpreter, or the binary. */
  command: string;
  args: readonly string[];
  cwd: string;
  /** The launch's environment, then the spec's (which wins). */
  env: Readonly<Record<string, string>>;
  networkAllowList: readonly string[];
  readOnlyPaths: readonly string[];
  /** What the interpreter needs besides its program and that program's libraries (Python's standard library). */
  runtimeNeeds: readonly string[];
  /** Directories inside those that stay hidden (see root.ts). */
  hidden: readonly string[];
  limits?: Partial<EnforcedSandboxLimits>;
}

/** What the runtime finds on its host to run launches with. */
export interface Interpreters {
  python: () => Promise<PythonRuntime | { unavailable: string }>;
}

/**
 * The spec as the launch chain can take it: paths absolute, no NUL where the kernel or sh would cut a
 * string short, environment names the init script can set, a binary inside its root. Refused as
 * `invalid_request` otherwise, and as `unavailable` when it asks for what this runtime cannot run (an
 * image, or Python on a host without it).
 */
export async function checkSpec(input: SandboxSpecV2, interpreters: Interpreters): Promise<HostRun> {
  if ((input as { launch?: { kind?: unknown } }).launch?.kind === 'image') {
    throw new SigilError(
      'unavailable',
      'sandbox-linux-namespaces runs host programs only (node, python, binary), not images: run image launches with the Docker sandbox (sandbox-docker)',
      { details: { reason: 'image_unsupported' } },
    );
  }
  const parsed = specSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new SigilError(
      'invalid_request',
      `sandbox spec ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`,
    );
  }
  const { launch, ...spec } = parsed.data;
  const base = {
    root: launch.root,
    args: launch.args,
    cwd: launch.cwd ?? launch.root,
    env: { ...launch.env, ...spec.env },
    networkAllowList: spec.networkAllowList,
    readOnlyPaths: launch.readOnlyPaths ?? [],
    ...(spec.limits ? { limits: spec.limits } : {}),
  };
  switch (launch.runtime) {
    case 'node':
      return { ...base, command: realpathSync(process.execPath), runtimeNeeds: [], hidden: [] };
    case 'python': {
      const python = await interpreters.python();
      if ('unavailable' in python) {
        throw new SigilError('unavailable', `a python launch cannot run here: ${python.unavailable}`, {
          details: { reason: 'python_unavailable' },
        });
      }
      return {
        ...base,
        command: python.interpreter.executable,
        runtimeNeeds: python.needs,
        hidden: python.interpreter.hidden,
      };
    }
    case 'binary':
      return { ...base, command: resolveExecutable(launch.command as string), runtimeNeeds: [], hidden: [] };
  }
}
