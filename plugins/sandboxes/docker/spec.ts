import { isAbsolute, relative } from 'node:path';
import { z } from 'zod';
import { SigilError, type SandboxSpecV2 } from '@sigil/plugin-api';
import { absolutePath, limitsSchema } from './config.ts';
import { parseHostPort } from '@sigil/plugin-api/egress';

/** Shell variable names (the env wrapper exports them); `__sigil_` names are the wrapper's own. */
const ENV_NAME = /^(?!__sigil_)[A-Za-z_][A-Za-z0-9_]*$/;
const noNul = (value: string) => !value.includes('\0');
const text = z.string().refine(noNul, 'cannot hold NUL');

const environment = z.record(z.string(), text).superRefine((env, ctx) => {
  for (const name of Object.keys(env)) {
    if (!ENV_NAME.test(name)) {
      ctx.addIssue({
        code: 'custom',
        path: [name],
        message: 'environment names must be shell identifiers, other than __sigil_*',
      });
    }
  }
});

const inside = (root: string, path: string) => {
  const rel = relative(root, path);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
};

const hostLaunch = z
  .object({
    kind: z.literal('host'),
    runtime: z.enum(['node', 'python', 'binary']),
    root: absolutePath,
    command: absolutePath.optional(),
    args: z.array(text),
    cwd: absolutePath.optional(),
    readOnlyPaths: z.array(absolutePath).optional(),
    env: environment.optional(),
  })
  .superRefine((launch, ctx) => {
    if (launch.runtime === 'binary' && (!launch.command || !inside(launch.root, launch.command))) {
      ctx.addIssue({
        code: 'custom',
        path: ['command'],
        message: 'a binary is an absolute path inside root',
      });
    }
  });

const imageLaunch = z.object({
  kind: z.literal('image'),
  image: z
    .string()
    .regex(
      /^[a-z0-9][a-z0-9._\-/:]*@sha256:[0-9a-f]{64}$/,
      'must be repository@sha256:<64 hex>, never a tag',
    ),
  entrypoint: z.array(text).optional(),
  args: z.array(text),
  cwd: absolutePath.optional(),
  layout: absolutePath.optional(),
  env: environment.optional(),
});

const specSchema = z.object({
  launch: z.discriminatedUnion('kind', [hostLaunch, imageLaunch]),
  env: environment,
  networkAllowList: z.array(
    z.string().refine((entry) => parseHostPort(entry) !== undefined, 'must be host:port'),
  ),
  limits: limitsSchema.partial().optional(),
  labels: z.record(z.string().regex(/^[a-z0-9][a-z0-9._-]*$/), text).optional(),
});

export type CheckedSpec = z.infer<typeof specSchema>;
export type CheckedHostLaunch = z.infer<typeof hostLaunch>;
export type CheckedImageLaunch = z.infer<typeof imageLaunch>;

/** The spec as a container can take it; `invalid_request` naming the field otherwise. */
export function checkSpec(input: SandboxSpecV2): CheckedSpec {
  const parsed = specSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new SigilError(
      'invalid_request',
      `sandbox spec ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`,
      { details: { reason: 'invalid_spec' } },
    );
  }
  return parsed.data;
}
