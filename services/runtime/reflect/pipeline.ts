import type { VaultSession } from '../vault/index.ts';

/** When a wallet's self-improvement runs by itself (`PUT /wallet/settings`); all times in UTC. */
export const SCHEDULES = ['after_each', 'daily', 'weekly', 'biweekly'] as const;
export type Schedule = (typeof SCHEDULES)[number];

/** One run's work, handed to the pipeline by the scheduler or a manual trigger. */
export interface ReflectJob {
  wallet: string;
  runId: string;
  /**
   * The claim of the run this job works under (ReflectRun.attempt, from 1): a run resumed after its
   * replica died is a new attempt, and holds and charges under keys of its own.
   */
  attempt: number;
  trigger: 'manual' | 'schedule';
  /**
   * A session whose vault may hold the BYOK key: the signed-in caller of a manual trigger, or the
   * session whose unlock let a waiting run go on. None for a scheduled run.
   */
  principal?: VaultSession;
  signal: AbortSignal;
}

/** What one run did, recorded in its history entry. */
export interface ReflectOutcome {
  sessions: number;
  facets: number;
  learnings: number;
  skills: number;
  llmCalls: number;
  inputTokens: number;
  outputTokens: number;
  /** Charged to the ledger, in its base units: the sum of the run's settlements (one per agent). */
  charged: bigint;
  /** Ids of what the run produced, for the history route. */
  produced: { facets: string[]; learnings: string[]; skills: string[] };
}

/** A run's products read back for its history entry; what was since forgotten is left out. */
export interface ProducedItems {
  facets: { id: string; kind: string; statement: string; sessionId: string }[];
  learnings: { id: string; statement: string; confidence: number; status: string }[];
  skills: { id: string; name: string; version: number; description: string }[];
}

/** What a wallet has learned so far, for the status route. */
export interface ReflectCounts {
  facets: number;
  learnings: number;
  skills: number;
}

/**
 * The self-improvement pipeline (facets → learnings → skills) as the scheduler sees it. `run` throws
 * a SigilError with `details.reason === 'vault_locked'` when no BYOK key is reachable and the internal
 * key is off: the run then waits (`waiting_for_unlock`) and is retried when a session unlocks.
 */
export interface ReflectPipeline {
  /** Recorded on each run it works on (the history says which version produced what). */
  readonly version: string;
  run(job: ReflectJob): Promise<ReflectOutcome>;
  counts(wallet: string): Promise<ReflectCounts>;
  /** The items behind a run's `produced` ids, in that order. */
  describe(wallet: string, produced: ReflectOutcome['produced']): Promise<ProducedItems>;
}
