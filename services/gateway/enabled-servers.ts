import { TtlCache } from '@sigil/plugin-api/cache';
import type { Clock } from '../../core/clock.ts';
import type { Database } from '../../core/db/database.ts';

/** Key of the enabled set when an authenticated caller sends no X-MCP-Session header. */
const DEFAULT_SESSION = 'default';

/**
 * How long a process trusts its copy of an enabled set. A change through this process replaces the
 * copy at once, and a call to a server missing from the copy reads the database again, so the bound
 * only delays how soon a replica stops serving a server that another replica disabled.
 */
export const ENABLED_SET_TTL_MS = 2000;

/**
 * Which servers a caller has enabled. An authenticated wallet's set lives in the database under
 * (wallet, X-MCP-Session), so it survives restarts, works across replicas, and one wallet can never
 * read or change another's even with the same session id. An anonymous caller's set lasts one request.
 */
export class EnabledServers {
  private readonly sets: TtlCache<string, readonly string[]>;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    options: { ttlMs?: number } = {},
  ) {
    this.sets = new TtlCache({ ttlMs: options.ttlMs ?? ENABLED_SET_TTL_MS, maxEntries: 10_000 });
  }

  /** The enabled server ids, sorted; shared and frozen. */
  list(wallet: string | undefined, sessionId: string | undefined): Promise<readonly string[]> {
    if (wallet === undefined) return Promise.resolve([]);
    const key = { wallet, session_id: sessionId ?? DEFAULT_SESSION };
    return this.sets.get(cacheKey(key), async () => {
      const row = (await this.db('gateway_sessions').where(key).first('enabled')) as
        { enabled: string } | undefined;
      return Object.freeze(row ? (JSON.parse(row.enabled) as string[]) : []);
    });
  }

  async includes(
    wallet: string | undefined,
    sessionId: string | undefined,
    serverId: string,
  ): Promise<boolean> {
    if ((await this.list(wallet, sessionId)).includes(serverId)) return true;
    if (wallet === undefined) return false;
    // Another replica may have enabled it since this process last looked.
    this.sets.delete(cacheKey({ wallet, session_id: sessionId ?? DEFAULT_SESSION }));
    return (await this.list(wallet, sessionId)).includes(serverId);
  }

  /** Adds or removes one server atomically (a transaction, so parallel enables do not lose each other). */
  async change(
    wallet: string,
    sessionId: string | undefined,
    serverId: string,
    enabled: boolean,
  ): Promise<readonly string[]> {
    const key = { wallet, session_id: sessionId ?? DEFAULT_SESSION };
    const next = await this.db.transaction(async (trx) => {
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
      return Object.freeze(next);
    });
    this.sets.set(cacheKey(key), next);
    return next;
  }
}

const cacheKey = (key: { wallet: string; session_id: string }): string => `${key.wallet}\0${key.session_id}`;
