import { z } from 'zod';
import { SigilError, type SandboxSpec } from '@sigil/plugin-api';
import { absolutePath, limitsSchema } from './config.ts';
import { parseHostPort } from './egress-proxy.ts';

/** Shell variable names only; PPID is read-only in sh, and `__sigil_` names are the init script's own. */
const ENV_NAME = /^(?!PPID$|__sigil_)[A-Za-z_][A-Za-z0-9_]*$/;
const noNul = (value: string) => !value.includes('\0');

const specSchema = z.object({
  packagePath: absolutePath,
  command: z.string().min(1).refine(noNul),
  args: z.array(z.string().refine(noNul, 'arguments cannot hold NUL')),
  cwd: absolutePath.optional(),
  env: z
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
    }),
  networkAllowList: z.array(
    z.string().refine((entry) => parseHostPort(entry) !== undefined, 'must be host:port'),
  ),
  readOnlyPaths: z.array(absolutePath).optional(),
  limits: limitsSchema.partial().optional(),
});

export type CheckedSpec = z.infer<typeof specSchema>;

/**
 * The spec as the launch chain can take it: paths absolute, no NUL where the kernel or sh would cut
 * a string short, environment names the init script can set. Refused as `invalid_request` otherwise.
 */
export function checkSpec(input: SandboxSpec): CheckedSpec {
  const parsed = specSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new SigilError(
      'invalid_request',
      `sandbox spec ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`,
    );
  }
  return parsed.data;
}
