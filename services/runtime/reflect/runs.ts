import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { isConstraintViolation } from '../../../core/db/database.ts';
import { asText, toAmount } from '../ledger/amounts.ts';
import type { ReflectJob, ReflectOutcome } from './pipeline.ts';

export const RUN_STATUSES = ['queued', 'running', 'waiting_for_unlock', 'succeeded', 'failed'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
/** A wallet has at most one run in these (the index reflect_runs_one_active). */
export const ACTIVE_STATUSES: readonly RunStatus[] = ['queued', 'running', 'waiting_for_unlock'];

/** Why a run failed or waits: a stable code and a message safe to show its owner. */
export interface RunError {
  code: string;
  message: string;
}

export interface ReflectRun {
  id: string;
  wallet: string;
  trigger: ReflectJob['trigger'];
  status: RunStatus;
  /** The pipeline version that last worked on it; null until one did. */
  pipelineVersion: string | null;
  /** Claims so far; each claim's number fences its writes. */
  attempt: number;
  /** Times it was taken over from a replica that died while running it. */
  resumes: number;
  dueAt: Date;
  createdAt: Date;
  startedAt: Date | null;
  endedAt: Date | null;
  updatedAt: Date;
  /** What it did, once succeeded. */
  outcome: ReflectOutcome | null;
  error: RunError | null;
}

interface RunRow {
  id: string;
  wallet: string;
  trigger: ReflectJob['trigger'];
  status: RunStatus;
  pipeline_version: string | null;
  attempt: number;
  resumes: number;
  due_at: number | string;
  created_at: number | string;
  started_at: number | string | null;
  ended_at: number | string | null;
  updated_at: number | string;
  sessions: number | null;
  facets: number | null;
  learnings: number | null;
  skills: number | null;
  llm_calls: number | null;
  input_tokens: number | string | null;
  output_tokens: number | string | null;
  charged: string | null;
  produced: string | null;
  error_code: string | null;
  error_message: string | null;
}

const date = (value: number | string | null): Date | null =>
  value === null ? null : new Date(Number(value));

function runOf(row: RunRow): ReflectRun {
  return {
    id: row.id,
    wallet: row.wallet,
    trigger: row.trigger,
    status: row.status,
    pipelineVersion: row.pipeline_version,
    attempt: Number(row.attempt),
    resumes: Number(row.resumes),
    dueAt: new Date(Number(row.due_at)),
    createdAt: new Date(Number(row.created_at)),
    startedAt: date(row.started_at),
    endedAt: date(row.ended_at),
    updatedAt: new Date(Number(row.updated_at)),
    outcome:
      row.status === 'succeeded'
        ? {
            sessions: Number(row.sessions),
            facets: Number(row.facets),
            learnings: Number(row.learnings),
            skills: Number(row.skills),
            llmCalls: Number(row.llm_calls),
            inputTokens: Number(row.input_tokens),
            outputTokens: Number(row.output_tokens),
            charged: toAmount(row.charged),
            produced: JSON.parse(row.produced ?? '{}') as ReflectOutcome['produced'],
          }
        : null,
    error: row.error_code === null ? null : { code: row.error_code, message: row.error_message ?? '' },
  };
}

const encodeCursor = (run: ReflectRun): string =>
  Buffer.from(`r:${run.createdAt.getTime()}:${run.id}`).toString('base64url');

function decodeCursor(cursor: string): { createdAt: number; id: string } {
  const match = /^r:([0-9]{1,15}):([0-9a-f-]{36})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match) throw new SigilError('invalid_request', 'Invalid query.cursor: not a cursor this API returned');
  return { createdAt: Number(match[1]), id: match[2] as string };
}

/**
 * The wallets' self-improvement runs (`reflect_runs`). Every write of a run's worker is fenced by the
 * attempt it claimed: once another replica took the run over (a new attempt), the old worker's
 * renewals and results change nothing.
 */
export class ReflectRuns {
  constructor(
    private readonly db: Knex,
    private readonly clock: Clock,
  ) {}

  /**
   * A manual run of the wallet, claimed at once by the caller's replica (running, attempt 1, leased
   * for `leaseMs`); or, when the wallet has one already, that one (`created: false`).
   */
  async start(
    wallet: string,
    version: string,
    leaseMs: number,
  ): Promise<{ run: ReflectRun; created: boolean }> {
    // A constraint violation is another trigger winning between the read and the insert: read again.
    for (let tries = 0; ; tries++) {
      const active = await this.active(wallet);
      if (active) return { run: active, created: false };
      const now = this.now();
      try {
        return {
          run: await this.insert(this.db, wallet, 'manual', {
            status: 'running',
            attempt: 1,
            pipeline_version: version,
            due_at: now + leaseMs,
            started_at: now,
          }),
          created: true,
        };
      } catch (err) {
        if (!isConstraintViolation(err) || tries >= 2) throw err;
      }
    }
  }

  /** A scheduled run of the wallet, queued for the next claim (in the transaction that took its occurrence). */
  enqueue(trx: Knex, wallet: string): Promise<ReflectRun> {
    return this.insert(trx, wallet, 'schedule', { status: 'queued', due_at: this.now() });
  }

  async get(id: string): Promise<ReflectRun | undefined> {
    const row = (await this.select(this.db).where({ id }).first()) as RunRow | undefined;
    return row ? runOf(row) : undefined;
  }

  /** The wallet's queued, running or waiting run, if any. */
  async active(wallet: string, db: Knex = this.db): Promise<ReflectRun | undefined> {
    const row = (await this.select(db).where({ wallet }).whereIn('status', ACTIVE_STATUSES).first()) as
      RunRow | undefined;
    return row ? runOf(row) : undefined;
  }

  /** The wallet's last run that ended (succeeded or failed). */
  async lastEnded(wallet: string): Promise<ReflectRun | undefined> {
    const row = (await this.select(this.db)
      .where({ wallet })
      .whereIn('status', ['succeeded', 'failed'])
      .orderBy([
        { column: 'ended_at', order: 'desc' },
        { column: 'id', order: 'desc' },
      ])
      .first()) as RunRow | undefined;
    return row ? runOf(row) : undefined;
  }

  /** Runs due for a claim: queued, waiting and due for a retry, or running with their lease run out. */
  async claimable(limit: number): Promise<ReflectRun[]> {
    const rows = (await this.select(this.db)
      .whereIn('status', ACTIVE_STATUSES)
      .andWhere('due_at', '<=', this.now())
      .orderBy('due_at')
      .limit(limit)) as RunRow[];
    return rows.map(runOf);
  }

  /**
   * Claims a run read by `claimable` (compare-and-set on its attempt, status and due time): running,
   * attempt + 1, leased for `leaseMs`. A run taken from a dead replica counts a resume. Undefined when
   * another replica claimed it first.
   */
  async claim(run: ReflectRun, version: string, leaseMs: number): Promise<ReflectRun | undefined> {
    const now = this.now();
    const claimed = await this.due(run).update({
      status: 'running',
      attempt: run.attempt + 1,
      resumes: run.resumes + (run.status === 'running' ? 1 : 0),
      pipeline_version: version,
      due_at: now + leaseMs,
      started_at: run.startedAt?.getTime() ?? now,
      updated_at: now,
      error_code: null,
      error_message: null,
    });
    return claimed === 1 ? this.get(run.id) : undefined;
  }

  /** Ends a run read by `claimable` as failed without running it (compare-and-set as `claim`). */
  async abandon(run: ReflectRun, error: RunError): Promise<boolean> {
    return (await this.due(run).update(this.ended('failed', error))) === 1;
  }

  /** Renews the lease of the worker of `attempt`; false when it lost the run. */
  async renew(id: string, attempt: number, leaseMs: number): Promise<boolean> {
    return this.held(id, attempt, { due_at: this.now() + leaseMs });
  }

  succeed(id: string, attempt: number, outcome: ReflectOutcome): Promise<boolean> {
    return this.held(id, attempt, {
      ...this.ended('succeeded', null),
      sessions: outcome.sessions,
      facets: outcome.facets,
      learnings: outcome.learnings,
      skills: outcome.skills,
      llm_calls: outcome.llmCalls,
      input_tokens: outcome.inputTokens,
      output_tokens: outcome.outputTokens,
      charged: outcome.charged.toString(),
      produced: JSON.stringify(outcome.produced),
    });
  }

  fail(id: string, attempt: number, error: RunError): Promise<boolean> {
    return this.held(id, attempt, this.ended('failed', error));
  }

  /** No key to run with: waiting_for_unlock, tried again in `retryMs` (or when the wallet unlocks). */
  wait(id: string, attempt: number, error: RunError, retryMs: number): Promise<boolean> {
    return this.held(id, attempt, {
      status: 'waiting_for_unlock',
      due_at: this.now() + retryMs,
      error_code: error.code,
      error_message: error.message,
    });
  }

  /** Its worker stops (the replica shuts down): queued again, for the next claim anywhere. */
  release(id: string, attempt: number): Promise<boolean> {
    return this.held(id, attempt, { status: 'queued', due_at: this.now() });
  }

  /** Makes the wallet's waiting run due now; true when it has one. */
  async retryNow(wallet: string): Promise<boolean> {
    const moved = await this.db('reflect_runs')
      .where({ wallet, status: 'waiting_for_unlock' })
      .update({ due_at: this.now(), updated_at: this.now() });
    return moved > 0;
  }

  /** A page of the wallet's runs, newest first; `cursor` is the previous page's `nextCursor`. */
  async page(
    wallet: string,
    options: { limit: number; cursor?: string | undefined },
  ): Promise<{ runs: ReflectRun[]; nextCursor: string | undefined }> {
    let query = this.select(this.db)
      .where({ wallet })
      .orderBy([
        { column: 'created_at', order: 'desc' },
        { column: 'id', order: 'desc' },
      ])
      .limit(options.limit + 1);
    if (options.cursor !== undefined) {
      const after = decodeCursor(options.cursor);
      query = query.andWhere((q) =>
        q
          .where('created_at', '<', after.createdAt)
          .orWhere((w) => w.where('created_at', after.createdAt).andWhere('id', '<', after.id)),
      );
    }
    const rows = (await query) as RunRow[];
    const runs = rows.slice(0, options.limit).map(runOf);
    const last = runs[runs.length - 1];
    return { runs, nextCursor: rows.length > options.limit && last ? encodeCursor(last) : undefined };
  }

  private async insert(
    db: Knex,
    wallet: string,
    trigger: ReflectJob['trigger'],
    state: Pick<RunRow, 'status' | 'due_at'> & Partial<RunRow>,
  ): Promise<ReflectRun> {
    const now = this.now();
    const id = randomUUID();
    await db('reflect_runs').insert({
      id,
      wallet,
      trigger,
      attempt: 0,
      resumes: 0,
      created_at: now,
      updated_at: now,
      ...state,
    });
    return runOf((await this.select(db).where({ id }).first()) as RunRow);
  }

  /** The run as `claimable` read it, if no one claimed it since and it is still due. */
  private due(run: ReflectRun) {
    return this.db('reflect_runs')
      .where({ id: run.id, attempt: run.attempt, status: run.status })
      .andWhere('due_at', '<=', this.now());
  }

  /** Changes the run only while the worker of `attempt` holds it. */
  private async held(id: string, attempt: number, change: Record<string, unknown>): Promise<boolean> {
    const moved = await this.db('reflect_runs')
      .where({ id, attempt, status: 'running' })
      .update({ updated_at: this.now(), ...change });
    return moved === 1;
  }

  private ended(status: 'succeeded' | 'failed', error: RunError | null): Record<string, unknown> {
    const now = this.now();
    return {
      status,
      due_at: now,
      ended_at: now,
      updated_at: now,
      error_code: error?.code ?? null,
      error_message: error?.message ?? null,
    };
  }

  private select(db: Knex) {
    return db('reflect_runs').select(
      'id',
      'wallet',
      'trigger',
      'status',
      'pipeline_version',
      'attempt',
      'resumes',
      'due_at',
      'created_at',
      'started_at',
      'ended_at',
      'updated_at',
      'sessions',
      'facets',
      'learnings',
      'skills',
      'llm_calls',
      'input_tokens',
      'output_tokens',
      asText(db, 'charged'),
      'produced',
      'error_code',
      'error_message',
    );
  }

  private now(): number {
    return this.clock.now().getTime();
  }
}
