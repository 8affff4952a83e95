import type { z } from 'zod';
import { EvidenceLog, type Evidence } from './evidence.ts';
import type { EvidenceRedactor } from './redact.ts';

/**
 * The one shape shared by deployment requirements and plugin contract kits: a check with a stable id,
 * a level, the spec sentence it tests, and an async function that says pass, fail or not applicable.
 */

/** RFC 2119 levels: a failed MUST fails the run (exit 1); a failed SHOULD is reported only. */
export type Level = 'MUST' | 'SHOULD';

export type Status = 'pass' | 'fail' | 'not-applicable';

export type Outcome = { status: 'pass' } | { status: 'fail' | 'not-applicable'; reason: string };

export const pass = (): Outcome => ({ status: 'pass' });
export const fail = (reason: string): Outcome => ({ status: 'fail', reason });
export const notApplicable = (reason: string): Outcome => ({ status: 'not-applicable', reason });

/**
 * Thrown by helpers deep inside a check (an HTTP assertion, a feature probe) to end it with an
 * outcome, so a check reads as a straight sequence of steps instead of nested ifs.
 */
export class OutcomeSignal extends Error {
  constructor(readonly outcome: Outcome & { reason: string }) {
    super(outcome.reason);
    this.name = 'OutcomeSignal';
  }
}

export function failWith(reason: string): never {
  throw new OutcomeSignal({ status: 'fail', reason });
}

export function notApplicableBecause(reason: string): never {
  throw new OutcomeSignal({ status: 'not-applicable', reason });
}

/** Fails the check with `reason` unless `condition` holds. */
export function ensure(condition: unknown, reason: string): asserts condition {
  if (!condition) failWith(reason);
}

/** Fails unless `value` matches the schema; returns it typed. The reason names each bad field. */
export function expectShape<S extends z.ZodType>(schema: S, value: unknown, what: string): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.length ? issue.path.join('.') : '(value)'}: ${issue.message}`);
  failWith(`${what}: ${issues.join('; ')}`);
}

export interface CheckInfo {
  /** Stable id tied to its spec section, e.g. `GW-5.jwt-lifetime`, or a kit's `tee-backend.status-shape`. */
  id: string;
  level: Level;
  title: string;
  /** Where the requirement comes from, as a reader would look it up. */
  spec: string;
}

export interface Check<Context> extends CheckInfo {
  check(context: Context): Promise<Outcome>;
}

export interface CheckResult extends CheckInfo {
  status: Status;
  /** Why it failed or does not apply; absent on a pass. */
  reason?: string;
  evidence: readonly Evidence[];
  durationMs: number;
}

export interface RunChecksOptions<Context, C extends Check<Context>> {
  /** Builds the context one check runs with, around that check's own evidence log. */
  contextFor(evidence: EvidenceLog): Context;
  redactor: EvidenceRedactor;
  /** A check still running after this is failed, so one hung plugin or server cannot stall the run. */
  timeoutMs: number;
  /** Runs before a check; an outcome returned here replaces the check (e.g. a missing feature). */
  precondition?(check: C, context: Context): Promise<Outcome | undefined>;
  /** Called as each result is known (progress on a terminal). */
  onResult?(result: CheckResult): void;
}

/** Runs checks one after another (their order is the catalog's, and servers see no burst). */
export async function runChecks<Context, C extends Check<Context>>(
  checks: readonly C[],
  options: RunChecksOptions<Context, C>,
): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  for (const check of checks) {
    const evidence = new EvidenceLog(options.redactor);
    const context = options.contextFor(evidence);
    const started = performance.now();
    const outcome = await settle(
      async () => (await options.precondition?.(check, context)) ?? (await check.check(context)),
      options.timeoutMs,
    );
    const result: CheckResult = {
      id: check.id,
      level: check.level,
      title: check.title,
      spec: check.spec,
      status: outcome.status,
      ...(outcome.status === 'pass' ? {} : { reason: options.redactor.redact(outcome.reason) }),
      // A copy: a check that timed out may still be running, and must not change a reported result.
      evidence: [...evidence.entries],
      durationMs: Math.round(performance.now() - started),
    };
    results.push(result);
    options.onResult?.(result);
  }
  return results;
}

/** Runs one check to an outcome: a thrown OutcomeSignal is its outcome, anything else thrown a failure. */
async function settle(run: () => Promise<Outcome>, timeoutMs: number): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<Outcome>((resolve) => {
    timer = setTimeout(() => resolve(fail(`timed out after ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([run(), timeout]);
  } catch (err) {
    if (err instanceof OutcomeSignal) return err.outcome;
    return fail(`unexpected error: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    clearTimeout(timer);
  }
}
