import type { Clock } from '../../../core/clock.ts';

/**
 * How long an MCP 2026-07-28 client may reuse a result, and with whom (SEP-2549): `ttlMs` is its
 * freshness (as `max-age`), `cacheScope` whether it may be shared across authorization contexts.
 */
export interface CacheHint {
  ttlMs: number;
  cacheScope: 'public' | 'private';
}

/** Never reused: what a result that can change at any moment says. */
export const NOT_CACHED: CacheHint = Object.freeze({ ttlMs: 0, cacheScope: 'private' });

/**
 * The one place that says how long the gateway's lists stay true. Nothing notifies a 2026-07-28
 * client of a change (no `subscriptions/listen` stream), so a hint is never longer than the time
 * until the list can next change:
 *
 * - `POST /mcp` `tools/list`: private, 0. It is the wallet's and session's enabled servers, which any
 *   client or replica changes with `gateway_enable_server`; a longer hint would hide a tool a client
 *   has just enabled.
 * - `POST /mcp/server/:id` `tools/list`: public (verification runs without secrets, so the list is the
 *   same for every caller: the verified tools less the quarantined ones), for `gateway.mcp.listTtlSeconds`
 *   but never past the next daily refresh, when new versions are verified and tools re-pinned. An
 *   operator's approval of a quarantined tool may show up to that late: a hint, not a guarantee.
 * - `server/discover` on either: public, for `gateway.mcp.listTtlSeconds` (the capabilities, the
 *   instructions and the revisions served change only with a new gateway release).
 */
export class CacheHints {
  private readonly discoverHint: CacheHint;

  constructor(
    private readonly deps: {
      /** `gateway.mcp.listTtlSeconds` in milliseconds. */
      listTtlMs: number;
      clock: Clock;
      /** When the tool lists may next change by themselves (the next daily refresh), if ever. */
      nextChange: () => Date | undefined;
    },
  ) {
    this.discoverHint = Object.freeze({ ttlMs: deps.listTtlMs, cacheScope: 'public' });
  }

  discover(): CacheHint {
    return this.discoverHint;
  }

  /** The hint of a tools/list answer: of one server's endpoint (`perServer`), or of `POST /mcp`. */
  toolList(perServer: boolean): CacheHint {
    if (!perServer) return NOT_CACHED;
    const next = this.deps.nextChange();
    const untilChange =
      next === undefined ? Infinity : Math.max(0, next.getTime() - this.deps.clock.now().getTime());
    return { ttlMs: Math.min(this.deps.listTtlMs, untilChange), cacheScope: 'public' };
  }
}
