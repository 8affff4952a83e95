import { expect } from 'chai';
import { DailySchedule } from '@sigil/plugin-api/schedule';
import { ManualClock } from '../../../core/clock.ts';
import { CacheHints } from '../../../services/gateway/mcp/cache-hints.ts';

describe('MCP 2026-07-28 cache hints (cache-hints.ts)', () => {
  const clock = new ManualClock(Date.UTC(2026, 10, 26, 2, 0));
  const refresh = new DailySchedule(clock, '03:00', () => Promise.resolve());
  const hints = new CacheHints({ listTtlMs: 600_000, clock, nextChange: () => refresh.nextRun });

  it('never caches the /mcp tool list: the enabled set changes at any moment', () => {
    expect(hints.toolList(false)).to.deep.equal({ ttlMs: 0, cacheScope: 'private' });
  });

  it('shares a per-server tool list for the configured time, but not past the next daily refresh', () => {
    expect(hints.toolList(true)).to.deep.equal({ ttlMs: 600_000, cacheScope: 'public' });
    clock.set(new Date(Date.UTC(2026, 10, 26, 2, 58)));
    expect(hints.toolList(true)).to.deep.equal({ ttlMs: 120_000, cacheScope: 'public' });
    // Due and not yet run (or running): the list may change now.
    clock.set(new Date(Date.UTC(2026, 10, 26, 3, 0, 30)));
    expect(hints.toolList(true)).to.deep.equal({ ttlMs: 0, cacheScope: 'public' });
  });

  it('shares server/discover for the configured time, and a list for it when no refresh is scheduled', () => {
    expect(hints.discover()).to.deep.equal({ ttlMs: 600_000, cacheScope: 'public' });
    const unscheduled = new CacheHints({ listTtlMs: 60_000, clock, nextChange: () => undefined });
    expect(unscheduled.toolList(true)).to.deep.equal({ ttlMs: 60_000, cacheScope: 'public' });
  });
});
