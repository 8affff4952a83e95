import { z } from 'zod';
import type { SandboxLimits } from '../contracts/index.ts';

const MiB = 1024 * 1024;

/**
 * Every limit of the contract's `SandboxLimits`, each at least what a server needs to start. A
 * plugin's options take `.partial()` of it (defaults of the operator), and so does a spec's.
 */
export const sandboxLimitsSchema = z
  .object({
    memoryBytes: z
      .number()
      .int()
      .min(16 * MiB),
    cpuSeconds: z.number().int().positive(),
    pids: z.number().int().min(8),
    outputBytes: z.number().int().positive(),
    tmpBytes: z.number().int().min(MiB),
    openFiles: z.number().int().min(16),
    egressConnections: z.number().int().min(1),
  })
  .strict() satisfies z.ZodType<EnforcedSandboxLimits>;

/** The limits a sandbox runs under: every one of the contract's set. */
export type EnforcedSandboxLimits = Required<SandboxLimits>;

/** The limits where neither the operator nor the spec sets one. */
export const DEFAULT_SANDBOX_LIMITS: Readonly<EnforcedSandboxLimits> = Object.freeze({
  memoryBytes: 512 * MiB,
  cpuSeconds: 600,
  pids: 256,
  outputBytes: 256 * MiB,
  tmpBytes: 64 * MiB,
  openFiles: 1024,
  egressConnections: 64,
});
