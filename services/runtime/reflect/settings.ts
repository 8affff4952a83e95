import type { Knex } from 'knex';
import { z } from 'zod';
import type { Clock } from '../../../core/clock.ts';
import { SCHEDULES } from './pipeline.ts';
import { WalletCache } from './wallet-cache.ts';

/**
 * A wallet's settings document (`GET` and `PUT /wallet/settings`). PUT replaces the whole document:
 * a field left out takes its default. Unknown fields are refused, so a typo never passes as a default.
 */
export const settingsDocument = z
  .object({
    selfImprovement: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe('Whether runs start by themselves on the schedule (a manual trigger runs either way)'),
        useInChats: z
          .boolean()
          .default(true)
          .describe(
            "Whether chats get the wallet's learnings in their model's context and its skills as the load_skill tool",
          ),
        schedule: z
          .enum(SCHEDULES)
          .default('daily')
          .describe(
            'after_each: shortly after each completed chat message (debounced); daily: 00:00 UTC; weekly: Mondays 00:00 UTC; biweekly: every other Monday 00:00 UTC',
          ),
      })
      .strict()
      .prefault({})
      .describe(
        "Self-improvement: facets, learnings and skills drawn from the wallet's chat history (docs/self-improvement.md)",
      ),
  })
  .strict();

export type WalletSettingsDocument = z.infer<typeof settingsDocument>;

/** `PATCH /wallet/settings`: only the fields given change (a JSON merge patch of the document). */
export const settingsPatch = z
  .object({
    selfImprovement: z
      .object({
        enabled: z.boolean(),
        useInChats: z.boolean(),
        schedule: z.enum(SCHEDULES),
      })
      .partial()
      .strict(),
  })
  .partial()
  .strict();

export type SettingsPatch = z.infer<typeof settingsPatch>;
export type SelfImprovementChoice = WalletSettingsDocument['selfImprovement'];

/** What a wallet that never saved its settings has. */
export const DEFAULT_SETTINGS: WalletSettingsDocument = settingsDocument.parse({});

/** The stored settings documents, one per wallet. */
export class WalletSettings {
  private readonly cache: WalletCache<WalletSettingsDocument>;

  /** `cacheMs`: how long `recent` keeps a wallet's document (wallet-cache.ts). */
  constructor(
    private readonly db: Knex,
    private readonly clock: Clock,
    cacheMs = 0,
  ) {
    this.cache = new WalletCache(clock, cacheMs);
  }

  /**
   * The wallet's document as read within the last `cacheMs` (a chat turn's context and its schedule
   * after it): a change committed by `changed` here shows at once, another replica's within `cacheMs`.
   */
  recent(wallet: string): Promise<WalletSettingsDocument> {
    return this.cache.get(wallet, () => this.get(wallet));
  }

  /** The wallet's document changed (after its transaction committed). */
  changed(wallet: string): void {
    this.cache.invalidate(wallet);
  }

  /** The wallet's document, or the defaults when it never saved one. */
  async get(wallet: string, db: Knex = this.db): Promise<WalletSettingsDocument> {
    const row = (await db('wallet_settings').where({ wallet }).first('document')) as
      { document: string } | undefined;
    return row ? settingsDocument.parse(JSON.parse(row.document)) : DEFAULT_SETTINGS;
  }

  /** Replaces the wallet's document (in `trx`, beside what the change implies). */
  async put(trx: Knex, wallet: string, document: WalletSettingsDocument): Promise<void> {
    await trx('wallet_settings')
      .insert({ wallet, document: JSON.stringify(document), updated_at: this.clock.now().getTime() })
      .onConflict('wallet')
      .merge(['document', 'updated_at']);
  }
}
