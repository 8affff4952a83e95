import type { Knex } from 'knex';
import { SigilError } from '@sigil/plugin-api';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import type { Clock } from '../../../core/clock.ts';
import type { Logger } from '../../../core/log.ts';
import type { VaultSession } from '../vault/index.ts';
import type { SelfImprovementSettings } from './config.ts';
import type { ProducedItems, ReflectCounts, ReflectPipeline } from './pipeline.ts';
import { ReflectRuns, type ReflectRun } from './runs.ts';
import { ReflectScheduler } from './scheduler.ts';
import { ReflectSchedules } from './schedules.ts';
import {
  type SelfImprovementChoice,
  type SettingsPatch,
  WalletSettings,
  type WalletSettingsDocument,
} from './settings.ts';

export interface ReflectDeps {
  db: Knex;
  clock: Clock;
  logger: Logger;
  settings: SelfImprovementSettings;
  pipeline: ReflectPipeline;
}

export interface ReflectStatus extends SelfImprovementChoice {
  nextRunAt: Date | null;
  pipelineVersion: string;
  currentRun: ReflectRun | null;
  lastRun: ReflectRun | null;
  counts: ReflectCounts;
}

/**
 * Self-improvement as the routes and the rest of the runtime see it (docs/self-improvement.md): a
 * wallet's settings, its runs' status and history, manual triggers, and the events that move its
 * schedule (a completed chat message, a vault unlock).
 */
export class ReflectService {
  readonly walletSettings: WalletSettings;
  readonly runs: ReflectRuns;
  readonly schedules: ReflectSchedules;
  readonly scheduler: ReflectScheduler;
  /** The `chatted` calls not yet done, which `close` waits for (the database closes after it). */
  private readonly scheduling = new Set<Promise<void>>();

  constructor(private readonly deps: ReflectDeps) {
    const { db, clock, settings } = deps;
    this.walletSettings = new WalletSettings(db, clock, settings.contextCacheSeconds * 1000);
    this.runs = new ReflectRuns(db, clock);
    this.schedules = new ReflectSchedules(db, clock, {
      debounceMs: settings.afterEachDebounceSeconds * 1000,
      maxDelayMs: settings.afterEachMaxDelaySeconds * 1000,
    });
    this.scheduler = new ReflectScheduler({
      ...deps,
      runs: this.runs,
      schedules: this.schedules,
      walletSettings: this.walletSettings,
    });
  }

  settings(wallet: string): Promise<WalletSettingsDocument> {
    return this.walletSettings.get(wallet);
  }

  /** Replaces the wallet's settings; its next run follows them, in the same transaction. */
  async replaceSettings(wallet: string, document: WalletSettingsDocument): Promise<WalletSettingsDocument> {
    return this.changeSettings(wallet, () => document);
  }

  /** Changes only the fields `patch` names (`PATCH /wallet/settings`), read and written in one transaction. */
  async patchSettings(wallet: string, patch: SettingsPatch): Promise<WalletSettingsDocument> {
    return this.changeSettings(wallet, (current) => ({
      selfImprovement: { ...current.selfImprovement, ...patch.selfImprovement },
    }));
  }

  private changeSettings(
    wallet: string,
    change: (current: WalletSettingsDocument) => WalletSettingsDocument,
  ): Promise<WalletSettingsDocument> {
    return this.deps.db
      .transaction(async (trx) => {
        const document = change(await this.walletSettings.get(wallet, trx));
        await this.walletSettings.put(trx, wallet, document);
        await this.schedules.applySettings(trx, wallet, document.selfImprovement);
        return document;
      })
      .finally(() => this.walletSettings.changed(wallet));
  }

  /** The settings chats go by: as read within `contextCacheSeconds` (a change made here shows at once). */
  chatSettings(wallet: string): Promise<WalletSettingsDocument> {
    return this.walletSettings.recent(wallet);
  }

  async status(wallet: string): Promise<ReflectStatus> {
    const [settings, nextRunAt, current, last, counts] = await Promise.all([
      this.walletSettings.get(wallet),
      this.schedules.nextRunAt(wallet),
      this.runs.active(wallet),
      this.runs.lastEnded(wallet),
      this.deps.pipeline.counts(wallet),
    ]);
    return {
      ...settings.selfImprovement,
      nextRunAt,
      pipelineVersion: this.deps.pipeline.version,
      currentRun: current ?? null,
      lastRun: last ?? null,
      counts,
    };
  }

  trigger(principal: AuthPrincipal): Promise<{ run: ReflectRun; created: boolean }> {
    return this.scheduler.trigger(principal);
  }

  history(wallet: string, page: { limit: number; cursor?: string | undefined }) {
    return this.runs.page(wallet, page);
  }

  /** One of the wallet's runs, with what it produced read back (404 for any other wallet's). */
  async run(wallet: string, id: string): Promise<{ run: ReflectRun; produced: ProducedItems | null }> {
    const run = await this.runs.get(id);
    if (!run || run.wallet !== wallet)
      throw new SigilError('not_found', `No self-improvement run ${id} for this wallet`, {
        details: { reason: 'run_not_found' },
      });
    return {
      run,
      produced: run.outcome ? await this.deps.pipeline.describe(wallet, run.outcome.produced) : null,
    };
  }

  /** A chat message of the wallet completed (ChatService's onTurnCompleted). Never throws: logged. */
  chatted(wallet: string): Promise<void> {
    const scheduled = this.schedule(wallet).finally(() => this.scheduling.delete(scheduled));
    this.scheduling.add(scheduled);
    return scheduled;
  }

  private async schedule(wallet: string): Promise<void> {
    try {
      // The settings the turn's context was read with (no second read of them after the turn).
      await this.schedules.chatted(wallet, (await this.walletSettings.recent(wallet)).selfImprovement);
    } catch (err) {
      this.deps.logger.warn({ err, wallet }, 'self-improvement: a chat message was not scheduled for');
    }
  }

  /** A session unlocked its provider vault here (the vault's onUnlock). Never throws. */
  unlocked(session: VaultSession): Promise<void> {
    return this.scheduler.unlocked(session);
  }

  start(): void {
    this.scheduler.start();
  }

  /** Resolves once the chat messages completed so far are scheduled for. */
  async scheduled(): Promise<void> {
    await Promise.all(this.scheduling);
  }

  /** After the chats are drained: their last messages are scheduled for before the database closes. */
  async close(): Promise<void> {
    await this.scheduled();
    await this.scheduler.close();
  }
}
