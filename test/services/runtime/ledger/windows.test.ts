import { expect } from 'chai';
import { windowBounds } from '../../../../services/runtime/ledger/windows.ts';

describe('ledger: budget windows are calendar UTC', () => {
  const at = (iso: string) => new Date(iso);
  const bounds = (window: 'daily' | 'weekly' | 'monthly', iso: string) => {
    const b = windowBounds(window, at(iso));
    return [b.start.toISOString(), b.resetsAt.toISOString()];
  };

  it('a day runs from 00:00 UTC to the next 00:00 UTC', () => {
    expect(bounds('daily', '2026-03-18T23:59:59.999Z')).to.deep.equal([
      '2026-03-18T00:00:00.000Z',
      '2026-03-19T00:00:00.000Z',
    ]);
    expect(bounds('daily', '2026-03-19T00:00:00.000Z')[0]).to.equal('2026-03-19T00:00:00.000Z');
  });

  it('a week is an ISO week: Monday 00:00 UTC to the next Monday, Sunday included', () => {
    expect(bounds('weekly', '2026-03-22T23:59:59.999Z')).to.deep.equal([
      '2026-03-16T00:00:00.000Z',
      '2026-03-23T00:00:00.000Z',
    ]);
    expect(bounds('weekly', '2026-03-23T00:00:00.000Z')[0]).to.equal('2026-03-23T00:00:00.000Z');
    // Across a year boundary: Thursday 2026-01-01 is in the week of Monday 2025-12-29.
    expect(bounds('weekly', '2026-01-01T10:00:00.000Z')[0]).to.equal('2025-12-29T00:00:00.000Z');
  });

  it('a month runs from the 1st 00:00 UTC, whatever its length (leap February included)', () => {
    expect(bounds('monthly', '2028-02-29T12:00:00.000Z')).to.deep.equal([
      '2028-02-01T00:00:00.000Z',
      '2028-03-01T00:00:00.000Z',
    ]);
    expect(bounds('monthly', '2026-12-31T23:59:59.999Z')[1]).to.equal('2027-01-01T00:00:00.000Z');
  });

  it('windows follow UTC, not the process time zone', () => {
    const tz = process.env.TZ;
    process.env.TZ = 'Pacific/Kiritimati'; // UTC+14
    try {
      expect(bounds('daily', '2026-03-18T20:00:00.000Z')[0]).to.equal('2026-03-18T00:00:00.000Z');
    } finally {
      if (tz === undefined) delete process.env.TZ;
      else process.env.TZ = tz;
    }
  });
});
