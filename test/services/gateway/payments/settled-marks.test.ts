import { expect } from 'chai';
import { systemClock } from '../../../../core/clock.ts';
import { SettledMarks } from '../../../../services/gateway/payments/settlement-records.ts';
import type { Kernel } from '../../../../services/kernel.ts';
import { describeEachDatabase, openTestKernel } from '../../../support/kernel.ts';

/**
 * The `settled` marks of settlements whose answers left in the same turn are written in one
 * statement, each record with its own transaction, and only records still `settling` are marked.
 */
describeEachDatabase('payments: settled marks written together', (database) => {
  let kernel: Kernel;
  before(async () => {
    kernel = await openTestKernel({ database });
  });
  after(async () => {
    await kernel?.close();
  });

  const record = (id: string, state: string) => ({
    id,
    state,
    payer: '0xpayer',
    amount: '500',
    resource: 'test://marks',
    authorization: '{}',
    valid_before: 0,
    created_at: 1,
    updated_at: 1,
  });

  it('marks of one turn: one UPDATE, each its own transaction; a record no longer settling is left alone', async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `marks:${i}`);
    await kernel
      .db('payment_settlements')
      .insert([...ids.map((id) => record(id, 'settling')), record('marks:released', 'released')]);
    const statements: string[] = [];
    const count = (query: { sql: string }) => statements.push(query.sql);
    kernel.db.on('query', count);
    try {
      const marks = new SettledMarks({ db: kernel.db, clock: systemClock }, 1);
      await Promise.all([
        ...ids.map((id, i) => marks.mark(id, `0xtx${i}`)),
        marks.mark('marks:released', '0xnever'),
      ]);
      // One alone is written as before: by itself.
      await kernel.db('payment_settlements').insert(record('marks:alone', 'settling'));
      await marks.mark('marks:alone', '0xalone');
    } finally {
      kernel.db.off('query', count);
    }
    const updates = statements.filter((sql) => /^update/i.test(sql));
    // The thirteen of one turn in one statement, then the lone mark.
    expect(updates).to.have.length(2);
    expect(updates[0]).to.match(/case/i);
    const rows = (await kernel
      .db('payment_settlements')
      .whereLike('id', 'marks:%')
      .select('id', 'state', 'transaction', 'attempts', 'reason')) as {
      id: string;
      state: string;
      transaction: string | null;
      attempts: number;
    }[];
    const byId = new Map(rows.map((row) => [row.id, row]));
    ids.forEach((id, i) =>
      expect(byId.get(id)).to.deep.include({ state: 'settled', transaction: `0xtx${i}`, attempts: 1 }),
    );
    expect(byId.get('marks:released')).to.deep.include({ state: 'released', transaction: null });
    expect(byId.get('marks:alone')).to.deep.include({ state: 'settled', transaction: '0xalone' });
  });
});
