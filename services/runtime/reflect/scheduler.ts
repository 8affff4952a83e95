import type { Knex } from 'knex';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import type { Clock } from '../../../core/clock.ts';
import { STATUS_BY_CODE } from '../../../core/http/errors.ts';
import type { Logger } from '../../../core/log.ts';
import { PeriodicPass } from '../../../core/periodic.ts';
import type { SelfImprovementSettings } from './config.ts';
import type { ReflectOutcome, ReflectPipeline } from './pipeline.ts';
import type { ReflectRun, ReflectRuns, RunError } from './runs.ts';
import { nextOccurrence } from './schedule.ts';
import type { DueOccurrence, ReflectSchedules } from './schedules.ts';
import type { VaultSession } from '../vault/index.ts';
import type { WalletSettings } from './settings.ts';

export interface SchedulerDeps {
  db: Knex;
  clock: Clock;
  logger: Logger;
  settings: SelfImprovementSettings;
  pipeline: ReflectPipeline;
  runs: ReflectRuns;
  schedules: ReflectSchedules;
  walletSettings: WalletSettings;
}

/** What one pass did. */
export interface PassReport {
  /** Runs queued for the scheduled occurrences this replica took. */
  queued: string[];
  /** Runs this replica claimed and started. */
  started: string[];
  /** Runs ended as failed: their replica died while running them once more than maxResumes allows. */
  abandoned: string[];
}

/** A run this replica works on: the attempt it claimed, and how to stop it. */
interface Worker {
  attempt: number;
  controller: AbortController;
  done: Promise<void>;
}

/** Occurrences one pass takes at most (the rest are due at the next). */
const OCCURRENCE_BATCH = 50;

/** What a failure other than a SigilError shows the run's owner (the log has the error). */
const INTERNAL: RunError = {
  code: 'internal',
  message: 'The run failed on an internal error; the runtime log has it under the run id',
};

const errorOf = (err: unknown): RunError =>
  isSigilError(err) ? { code: err.code, message: err.message.slice(0, 1000) } : INTERNAL;

/** The pipeline's word that no key can be reached now (see ReflectPipeline). */
const isVaultLocked = (err: unknown): boolean => isSigilError(err) && err.details?.reason === 'vault_locked';

/**
 * Starts and works self-improvement runs, from state in the database only, so that a restart loses
 * nothing and replicas share the work. A pass, every `passIntervalSeconds` and on demand:
 *
 * 1. renews the lease of each run this replica works on (a lost one is aborted here);
 * 2. takes each due occurrence (compare-and-set on its time, so one replica takes it) and, in the
 *    same transaction, queues a run for it unless the wallet has one already;
 * 3. claims runs that are due (compare-and-set on their attempt): queued ones, waiting ones due for a
 *    retry, and running ones whose lease ran out (their replica died), which are resumed, or failed
 *    once they have been resumed `maxResumes` times.
 *
 * Time is the injected clock's: a test moves a ManualClock and calls `pass()`; only `start()` sets a
 * process timer.
 */
export class ReflectScheduler {
  private readonly periodic: PeriodicPass<PassReport>;
  private readonly workers = new Map<string, Worker>();
  private closing = false;

  constructor(private readonly deps: SchedulerDeps) {
    this.periodic = new PeriodicPass({
      pass: () => this.onePass(),
      intervalMs: deps.settings.passIntervalSeconds * 1000,
      logger: deps.logger,
      failure: 'self-improvement: a pass failed',
    });
  }

  /** A pass now (or the one under way). */
  pass(): Promise<PassReport> {
    return this.periodic.run();
  }

  /** Passes every passIntervalSeconds, the first at once (what was due while no replica ran). */
  start(): void {
    this.periodic.start();
    this.pass().catch((err: unknown) =>
      this.deps.logger.warn({ err: (err as Error).message }, 'self-improvement: a pass failed'),
    );
  }

  /** Stops passing, and stops each run under way here: each is queued again for the next claim. */
  async close(): Promise<void> {
    this.closing = true;
    await this.periodic.stop();
    for (const worker of this.workers.values())
      worker.controller.abort(new SigilError('unavailable', 'The runtime is shutting down'));
    await this.settled();
  }

  /** Resolves once every run this replica works on has ended here. */
  async settled(): Promise<void> {
    while (this.workers.size > 0) await Promise.all([...this.workers.values()].map((w) => w.done));
  }

  /**
   * A manual run for the signed-in wallet, started here with the caller's session (its vault may
   * hold the key), or the wallet's run under way (`created: false`). A run waiting for a key is tried
   * again at once, with this caller's session.
   */
  async trigger(principal: AuthPrincipal): Promise<{ run: ReflectRun; created: boolean }> {
    if (this.closing) throw new SigilError('unavailable', 'The runtime is shutting down');
    const { pipeline, runs, settings } = this.deps;
    const { run, created } = await runs.start(
      principal.address,
      pipeline.version,
      settings.leaseSeconds * 1000,
    );
    if (created) {
      await this.deps.schedules.coveredBy(run.wallet, run.createdAt.getTime());
      this.work(run, principal);
    } else if (run.status === 'waiting_for_unlock')
      return { run: (await this.retry(run.wallet, principal)) ?? run, created };
    return { run, created };
  }

  /**
   * A session unlocked its vault here: its wallet's waiting run, if any, is tried again at once, with
   * that session. Never throws (logged).
   */
  async unlocked(session: VaultSession): Promise<void> {
    if (this.closing) return;
    await this.retry(session.address, session).catch((err: unknown) =>
      this.deps.logger.warn(
        { err, wallet: session.address },
        'self-improvement: retrying a waiting run failed',
      ),
    );
  }

  /** Makes the wallet's waiting run due and claims it for this replica; the run as it then is. */
  private async retry(wallet: string, principal: VaultSession): Promise<ReflectRun | undefined> {
    const { runs } = this.deps;
    if (!(await runs.retryNow(wallet))) return undefined;
    const waiting = await runs.active(wallet);
    if (waiting?.status !== 'waiting_for_unlock') return waiting;
    return (await this.claim(waiting, principal)) ?? (await runs.get(waiting.id));
  }

  private async onePass(): Promise<PassReport> {
    const report: PassReport = { queued: [], started: [], abandoned: [] };
    await this.renewLeases();
    if (this.closing) return report;
    for (const occurrence of await this.deps.schedules.due(OCCURRENCE_BATCH)) {
      // A failure (another replica's run inserted meanwhile, a lock timeout) leaves it due for the next pass.
      const queued = await this.take(occurrence).catch((err: unknown) => {
        this.deps.logger.debug({ err, wallet: occurrence.wallet }, 'self-improvement: occurrence left due');
        return undefined;
      });
      if (queued) report.queued.push(queued.id);
    }
    const room = this.deps.settings.maxConcurrentRuns - this.workers.size;
    if (room <= 0) return report;
    for (const run of await this.deps.runs.claimable(room)) {
      if (this.workers.has(run.id)) continue;
      if (run.status === 'running' && run.resumes >= this.deps.settings.maxResumes) {
        if (await this.abandon(run)) report.abandoned.push(run.id);
      } else if (await this.claim(run)) report.started.push(run.id);
    }
    return report;
  }

  private async renewLeases(): Promise<void> {
    const leaseMs = this.deps.settings.leaseSeconds * 1000;
    for (const [id, worker] of this.workers) {
      if ((await this.deps.runs.renew(id, worker.attempt, leaseMs)) || this.workers.get(id) !== worker)
        continue;
      this.deps.logger.warn(
        { run: id },
        'self-improvement: the run was taken over elsewhere; stopping it here',
      );
      worker.controller.abort(new SigilError('conflict', 'Another replica took the run over'));
    }
  }

  /** Takes a due occurrence and queues its run, in one transaction; the run queued, if any. */
  private async take(occurrence: DueOccurrence): Promise<ReflectRun | undefined> {
    const { db, schedules, runs, walletSettings, clock } = this.deps;
    const choice = (await walletSettings.get(occurrence.wallet)).selfImprovement;
    const following =
      choice.enabled && choice.schedule !== 'after_each'
        ? nextOccurrence(choice.schedule, clock.now()).getTime()
        : null;
    return db.transaction(async (trx) => {
      // Written first: on SQLite the transaction then holds the write lock from its first statement.
      if (!(await schedules.take(trx, occurrence, following)) || !choice.enabled) return undefined;
      const active = await runs.active(occurrence.wallet, trx);
      if (!active) return runs.enqueue(trx, occurrence.wallet);
      // A queued or waiting run has not read the history yet, so it covers this occurrence; a running
      // one may have, so after_each messages wait for another run (a timed schedule's next one).
      if (active.status === 'running' && occurrence.pendingSince !== null)
        await schedules.postpone(trx, occurrence);
      return undefined;
    });
  }

  /** Claims a due run and starts it here; the claimed run, or undefined when another replica won. */
  private async claim(run: ReflectRun, principal?: VaultSession): Promise<ReflectRun | undefined> {
    const { runs, pipeline, settings } = this.deps;
    const claimed = await runs.claim(run, pipeline.version, settings.leaseSeconds * 1000);
    if (claimed) this.work(claimed, principal);
    return claimed;
  }

  private async abandon(run: ReflectRun): Promise<boolean> {
    const abandoned = await this.deps.runs.abandon(run, {
      code: 'run_abandoned',
      message: `The replica running it stopped without finishing, ${run.resumes + 1} times; it is not resumed again`,
    });
    if (abandoned)
      this.deps.logger.warn({ run: run.id, wallet: run.wallet }, 'self-improvement: run abandoned');
    return abandoned;
  }

  private work(run: ReflectRun, principal: VaultSession | undefined): void {
    const controller = new AbortController();
    const worker: Worker = { attempt: run.attempt, controller, done: Promise.resolve() };
    this.workers.set(run.id, worker);
    worker.done = this.execute(run, controller.signal, principal)
      .catch((err: unknown) =>
        this.deps.logger.error({ err, run: run.id }, "self-improvement: the run's end was not recorded"),
      )
      .finally(() => this.workers.delete(run.id));
  }

  private async execute(run: ReflectRun, signal: AbortSignal, principal?: VaultSession): Promise<void> {
    const { pipeline, runs, logger, settings } = this.deps;
    let outcome: ReflectOutcome;
    try {
      outcome = await pipeline.run({
        wallet: run.wallet,
        runId: run.id,
        attempt: run.attempt,
        trigger: run.trigger,
        ...(principal ? { principal } : {}),
        signal,
      });
    } catch (err) {
      if (signal.aborted && this.closing) await runs.release(run.id, run.attempt);
      else if (isVaultLocked(err))
        await runs.wait(run.id, run.attempt, errorOf(err), settings.lockedRetrySeconds * 1000);
      else {
        if (!isSigilError(err) || STATUS_BY_CODE[err.code] >= 500)
          logger.warn({ err, run: run.id, wallet: run.wallet }, 'self-improvement: run failed');
        await runs.fail(run.id, run.attempt, errorOf(err));
      }
      return;
    }
    if (!(await runs.succeed(run.id, run.attempt, outcome)))
      logger.warn(
        { run: run.id },
        'self-improvement: the run was taken over elsewhere; this outcome is dropped',
      );
  }
}
