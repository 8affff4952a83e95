import type { Knex } from 'knex';
import type { Clock } from '../../../core/clock.ts';
import { afterEachDue, nextOccurrence } from './schedule.ts';
import type { SelfImprovementChoice } from './settings.ts';

/** A wallet whose scheduled run is due, as read (the values a claim compares with). */
export interface DueOccurrence {
  wallet: string;
  /** As the driver gave it: the claim compares the column with exactly this. */
  nextRunAt: number | string;
  /** after_each: since when it waits (unix ms), else null. */
  pendingSince: number | null;
}

interface ScheduleRow {
  wallet: string;
  next_run_at: number | string | null;
  pending_since: number | string | null;
}

const toMs = (value: number | string | null | undefined): number | null =>
  value === null || value === undefined ? null : Number(value);

/**
 * When each wallet's next self-improvement run is due (`reflect_schedules`), so that it survives a
 * restart and every replica sees the same. A wallet gets a row with its first completed chat message
 * or its first settings change: before, there is no history to learn from.
 */
/** Wallets whose schedule row this process knows to exist (the oldest forgotten beyond this many). */
const KNOWN_ROWS = 10_000;

export class ReflectSchedules {
  /** Wallets known to have a row: rows are never deleted, so a timed schedule's insert would do nothing. */
  private readonly known = new Set<string>();

  constructor(
    private readonly db: Knex,
    private readonly clock: Clock,
    private readonly afterEach: { debounceMs: number; maxDelayMs: number },
  ) {}

  async nextRunAt(wallet: string): Promise<Date | null> {
    const next = toMs((await this.row(this.db, wallet))?.next_run_at);
    return next === null ? null : new Date(next);
  }

  /**
   * The wallet's settings changed (in their transaction): its next run follows the new choice. A
   * switch to after_each counts as a message: what was chatted before is run for shortly after.
   */
  async applySettings(trx: Knex, wallet: string, choice: SelfImprovementChoice): Promise<void> {
    const now = this.now();
    if (!choice.enabled) return this.write(trx, wallet, null, null);
    if (choice.schedule !== 'after_each')
      return this.write(trx, wallet, nextOccurrence(choice.schedule, new Date(now)).getTime(), null);
    const pending = toMs((await this.row(trx, wallet))?.pending_since) ?? now;
    return this.write(trx, wallet, afterEachDue(pending, now, this.afterEach), pending);
  }

  /**
   * A run starting now reads every message chatted before it: an after_each run waiting only for
   * those is no longer due (it would find nothing). Messages after `startedAt` keep theirs.
   */
  async coveredBy(wallet: string, startedAt: number): Promise<void> {
    await this.db('reflect_schedules')
      .where({ wallet })
      .andWhere('pending_since', '<=', startedAt)
      .update({ next_run_at: null, pending_since: null, updated_at: this.now() });
  }

  /**
   * A chat message of the wallet completed: after_each pushes its run back (within the max delay);
   * a timed schedule starts if the wallet had none (its history begins).
   */
  async chatted(wallet: string, choice: SelfImprovementChoice): Promise<void> {
    if (!choice.enabled) return;
    const now = this.now();
    if (choice.schedule !== 'after_each') {
      if (this.known.has(wallet)) return;
      await this.db('reflect_schedules')
        .insert({
          wallet,
          next_run_at: nextOccurrence(choice.schedule, new Date(now)).getTime(),
          pending_since: null,
          updated_at: now,
        })
        .onConflict('wallet')
        .ignore();
      this.known.add(wallet);
      if (this.known.size > KNOWN_ROWS) this.known.delete(this.known.values().next().value as string);
      return;
    }
    const pending = toMs((await this.row(this.db, wallet))?.pending_since) ?? now;
    await this.write(this.db, wallet, afterEachDue(pending, now, this.afterEach), pending);
  }

  /** Occurrences due now, the longest due first. */
  async due(limit: number): Promise<DueOccurrence[]> {
    const rows = (await this.db('reflect_schedules')
      .select('wallet', 'next_run_at', 'pending_since')
      .where('next_run_at', '<=', this.now())
      .orderBy('next_run_at')
      .limit(limit)) as ScheduleRow[];
    return rows.map((row) => ({
      wallet: row.wallet,
      nextRunAt: row.next_run_at as number | string,
      pendingSince: toMs(row.pending_since),
    }));
  }

  /**
   * Takes a due occurrence in `trx`, compare-and-set on the time read: its next run becomes
   * `following` (null: none until the next message). False when another replica took it first.
   */
  async take(trx: Knex, occurrence: DueOccurrence, following: number | null): Promise<boolean> {
    const moved = await trx('reflect_schedules')
      .where({ wallet: occurrence.wallet, next_run_at: occurrence.nextRunAt })
      .update({ next_run_at: following, pending_since: null, updated_at: this.now() });
    return moved === 1;
  }

  /** after_each, while the wallet's run was already under way: the messages wait for another run. */
  async postpone(trx: Knex, occurrence: DueOccurrence): Promise<void> {
    const now = this.now();
    await this.write(trx, occurrence.wallet, now + this.afterEach.debounceMs, occurrence.pendingSince ?? now);
  }

  private row(db: Knex, wallet: string): Promise<ScheduleRow | undefined> {
    return db('reflect_schedules').where({ wallet }).first('wallet', 'next_run_at', 'pending_since');
  }

  private async write(
    db: Knex,
    wallet: string,
    nextRunAt: number | null,
    pendingSince: number | null,
  ): Promise<void> {
    await db('reflect_schedules')
      .insert({ wallet, next_run_at: nextRunAt, pending_since: pendingSince, updated_at: this.now() })
      .onConflict('wallet')
      .merge(['next_run_at', 'pending_since', 'updated_at']);
  }

  private now(): number {
    return this.clock.now().getTime();
  }
}
