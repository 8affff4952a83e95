import { randomUUID } from 'node:crypto';
import { SigilError } from '@sigil/plugin-api';
import type { AuthPrincipal } from '../../../../core/auth/index.ts';
import { ManualClock } from '../../../../core/clock.ts';
import { openDatabase, migrate, type Database } from '../../../../core/db/database.ts';
import { serviceMigrations } from '../../../../services/migrations.ts';
import { selfImprovementSchema } from '../../../../services/runtime/reflect/config.ts';
import type {
  ProducedItems,
  ReflectCounts,
  ReflectJob,
  ReflectOutcome,
  ReflectPipeline,
} from '../../../../services/runtime/reflect/pipeline.ts';
import { ReflectService } from '../../../../services/runtime/reflect/service.ts';
import type { VaultSession } from '../../../../services/runtime/vault/index.ts';
import { quietLogger, stickyDatabase, type TestDatabase } from '../../../support/kernel.ts';
import { randomWallet } from '../ledger/support.ts';

export { randomWallet };

/** Wednesday 2026-03-18 12:00:00 UTC. */
export const WEDNESDAY_NOON = Date.UTC(2026, 2, 18, 12);

/** A run the test holds: it began (`started`), and ends when the test says (or its signal aborts). */
export interface HeldRun {
  started: Promise<ReflectJob>;
  release(): void;
}

/**
 * The pipeline the scheduler is given in these tests (the dependency, not what is tested): it
 * records every job, answers an outcome numbered by its call, refuses with `vault_locked` while
 * `key` says the job's session reaches no key, and holds runs the test asks it to hold.
 */
export class RecordingPipeline implements ReflectPipeline {
  readonly version = 'test-pipeline-1';
  readonly jobs: ReflectJob[] = [];
  /** Whether a job's session reaches a key; unset: every job does. */
  key: ((principal: VaultSession | undefined) => Promise<boolean>) | undefined;
  private readonly outcomes = new Map<string, ReflectOutcome[]>();
  private readonly holds: { begin(job: ReflectJob): void; until: Promise<void> }[] = [];

  /** The next run to start waits until released (or aborted). */
  holdNext(): HeldRun {
    let begin!: (job: ReflectJob) => void;
    let release!: () => void;
    const started = new Promise<ReflectJob>((resolve) => (begin = resolve));
    const until = new Promise<void>((resolve) => (release = resolve));
    this.holds.push({ begin, until });
    return { started, release };
  }

  /** The jobs of one run, in order. */
  jobsOf(runId: string): ReflectJob[] {
    return this.jobs.filter((job) => job.runId === runId);
  }

  async run(job: ReflectJob): Promise<ReflectOutcome> {
    this.jobs.push(job);
    const call = this.jobs.length;
    const hold = this.holds.shift();
    if (hold) {
      hold.begin(job);
      await Promise.race([hold.until, aborted(job.signal)]);
    }
    if (this.key && !(await this.key(job.principal)))
      throw new SigilError('forbidden', 'No provider key is unlocked for this wallet', {
        details: { reason: 'vault_locked' },
      });
    const outcome: ReflectOutcome = {
      sessions: 1,
      facets: 2,
      learnings: 1,
      skills: 0,
      llmCalls: 2,
      inputTokens: 100 * call,
      outputTokens: 10 * call,
      charged: 1000n * BigInt(call),
      produced: {
        facets: [`facet-${call}-a`, `facet-${call}-b`],
        learnings: [`learning-${call}`],
        skills: [],
      },
    };
    this.outcomes.set(job.wallet, [...(this.outcomes.get(job.wallet) ?? []), outcome]);
    return outcome;
  }

  /** Its outcomes name items no memory holds: the route tests of the items use the real pipeline. */
  describe(): Promise<ProducedItems> {
    return Promise.resolve({ facets: [], learnings: [], skills: [] });
  }

  counts(wallet: string): Promise<ReflectCounts> {
    const done = this.outcomes.get(wallet) ?? [];
    const sum = (key: 'facets' | 'learnings' | 'skills') => done.reduce((n, o) => n + o[key], 0);
    return Promise.resolve({ facets: sum('facets'), learnings: sum('learnings'), skills: sum('skills') });
  }
}

function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason as Error);
    signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
  });
}

/** A signed-in session of `wallet`, as the routes would hand it over. */
export const principalOf = (wallet: `0x${string}`, clock: ManualClock): AuthPrincipal => ({
  address: wallet,
  method: 'jwt',
  operator: false,
  session: { id: randomUUID(), expiresAt: new Date(clock.now().getTime() + 3_600_000) },
});

/** One replica: its own connection pool on the shared database, its own scheduler. */
export interface Replica {
  db: Database;
  reflect: ReflectService;
  close(): Promise<void>;
}

/**
 * Replicas of the runtime's self-improvement on one real database (SQLite file or PostgreSQL schema),
 * each with its own connections, one ManualClock and one pipeline; `replica()` adds one (a restart
 * is closing one and adding another).
 */
export async function openReplicas(
  database: TestDatabase,
  options: { settings?: Record<string, unknown>; pipeline?: RecordingPipeline } = {},
) {
  const sticky = stickyDatabase(database);
  const { url, schema } = sticky.database.fresh();
  const clock = new ManualClock(WEDNESDAY_NOON);
  const pipeline = options.pipeline ?? new RecordingPipeline();
  const settings = selfImprovementSchema.parse(options.settings ?? {});
  const open: Replica[] = [];
  const first = await openDatabase({ url, ...(schema ? { schema } : {}) });
  await migrate(first, serviceMigrations);
  let pending: Database | undefined = first;

  async function replica(): Promise<Replica> {
    const db = pending ?? (await openDatabase({ url, ...(schema ? { schema } : {}) }));
    pending = undefined;
    const reflect = new ReflectService({ db, clock, logger: quietLogger(), settings, pipeline });
    const opened: Replica = {
      db,
      reflect,
      close: async () => {
        open.splice(open.indexOf(opened), 1);
        await reflect.close();
        await db.destroy();
      },
    };
    open.push(opened);
    return opened;
  }

  return {
    clock,
    pipeline,
    settings,
    replica,
    close: async () => {
      for (const replica of [...open]) await replica.close();
      await pending?.destroy();
      await sticky.drop();
    },
  };
}
