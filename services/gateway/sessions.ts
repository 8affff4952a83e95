import type { Clock } from '../../core/clock.ts';
import type { Database } from '../../core/db/database.ts';

/** Key of the enabled set when an authenticated caller sends no X-MCP-Session header. */
const DEFAULT_SESSION = 'default';

/**
 * Which servers a caller has enabled. An authenticated wallet's set lives in the database under
 * (wallet, X-MCP-Session), so it survives restarts, works across replicas, and one wallet can never
 * read or change another's even with the same session id. An anonymous caller's set lasts one request.
 */
export class EnabledServers {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async list(wallet: string | undefined, sessionId: string | undefined): Promise<string[]> {
    if (wallet === undefined) return [];
    const row = (await this.db('gateway_sessions')
      .where({ wallet, session_id: sessionId ?? DEFAULT_SESSION })
      .first('enabled')) as { enabled: string } | undefined;
    return row ? (JSON.parse(row.enabled) as string[]) : [];
  }

  /** Adds or removes one server atomically (a transaction, so parallel enables do not lose each other). */
  async change(
    wallet: string,
    sessionId: string | undefined,
    serverId: string,
    enabled: boolean,
  ): Promise<string[]> {
    const key = { wallet, session_id: sessionId ?? DEFAULT_SESSION };
    return this.db.transaction(async (trx) => {
      // Insert-if-absent first, so the row exists to be locked: two first enables then queue on it.
      await trx('gateway_sessions')
        .insert({ ...key, enabled: '[]', updated_at: 0 })
        .onConflict(['wallet', 'session_id'])
        .ignore();
      const row = (await trx('gateway_sessions').where(key).forUpdate().first('enabled')) as {
        enabled: string;
      };
      const current = new Set(JSON.parse(row.enabled) as string[]);
      if (enabled) current.add(serverId);
      else current.delete(serverId);
      const next = [...current].sort();
      await trx('gateway_sessions')
        .where(key)
        .update({ enabled: JSON.stringify(next), updated_at: this.clock.now().getTime() });
      return next;
    });
  }
}
