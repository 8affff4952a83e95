import { expect } from 'chai';
import { systemClock } from '../../../../core/clock.ts';
import type { Kernel } from '../../../../services/kernel.ts';
import { PaidResults } from '../../../../services/gateway/payments/paid-results.ts';
import { openTestKernel, quietLogger } from '../../../support/kernel.ts';

/**
 * The settling mark of every paid call sums its payer's kept result sizes. A busy payer has thousands
 * of records, each holding its kept result: the sum must read the index alone, or each call reads
 * every one of those records (2–3 ms of SQLite's CPU per call at 2000 of them, against ~0.6 ms).
 */
describe('payments: the kept-result quota read of the settling mark (SQLite)', () => {
  let kernel: Kernel;
  before(async () => {
    kernel = await openTestKernel();
  });
  after(async () => {
    await kernel?.close();
  });

  it('sums a payer’s kept bytes from a covering index, without reading the records', async () => {
    const results = new PaidResults({
      db: kernel.db,
      clock: systemClock,
      logger: quietLogger(),
      retentionMs: 60_000,
      maxBytes: 1024,
      maxBytesPerPayer: 4096,
      dataKey: undefined,
    });
    const { toKeep } = results.prepare('payment-1', '0xpayer', { content: [] });
    const [, room] = results.keptIfRoom(toKeep!).room;
    const plan = (await kernel.db.raw(`explain query plan ${room.toString()}`)) as { detail: string }[];
    expect(plan.map((step) => step.detail).join('; ')).to.match(
      /USING COVERING INDEX payment_settlements_payer_result_expires_at_result_bytes_index/,
    );
  });
});
