import { expect } from 'chai';
import { isLeaseLost, KeptLease, type Lease } from '@sigil/plugin-api';
import { DatabaseLeases } from '../../../core/db/leases.ts';
import { eventually } from '../../support/eventually.ts';
import { describeEachDatabase, openTwoHandles, type TwoHandles } from '../../support/kernel.ts';

/** Long enough for the statements between, short enough to wait out two thirds of. */
const TTL_MS = 600;
const NAMES = ['account:1', 'account:2'];

describeEachDatabase('plugin-api: a lease kept while a process runs', (database) => {
  let two: TwoHandles;
  let kept: KeptLease[];

  beforeEach(async () => {
    two = await openTwoHandles(database);
    kept = [];
  });
  afterEach(async () => {
    for (const lease of kept) await lease.stop();
    await two.close();
  });

  /** A process's kept lease on handle `at`, choosing among NAMES; `changes` records what it was told. */
  const keeper = async (at: 0 | 1, changes: (string | undefined)[] = []) => {
    const lease = new KeptLease(new DatabaseLeases(two.handles[at], await two.register(two.handles[at])), {
      names: NAMES,
      ttlMs: TTL_MS,
      changed: (now) => changes.push(now?.name),
    });
    kept.push(lease);
    return lease;
  };

  it('takes the first free name, so processes hold one each and the one too many holds none', async () => {
    const [first, second, third] = [await keeper(0), await keeper(1), await keeper(0)];
    const taken = [await first.ensure(), await second.ensure(), await third.ensure()];
    expect(taken.map((lease) => lease?.name)).to.deep.equal(['account:1', 'account:2', undefined]);
    expect(third.current()).to.equal(undefined);
  });

  it('gives its lease up when it stops: another process takes it at its next look', async () => {
    const changes: (string | undefined)[] = [];
    const [holder, waiting] = [await keeper(0), await keeper(1, changes)];
    await holder.start();
    const other = await keeper(0);
    await other.start();
    await waiting.start();
    expect(waiting.current()).to.equal(undefined);
    await holder.stop();
    // It looks again every third of TTL_MS.
    await eventually('the freed lease taken', async () => waiting.current()?.name === 'account:1');
    expect(changes).to.deep.equal(['account:1']);
  });

  it('acts only while it confirmed its lease within two thirds of its time; renewed on demand, and a write fenced by a lost one is refused', async () => {
    const holder = await keeper(0);
    const lease = (await holder.ensure()) as Lease;
    // Not started: nothing renews it.
    await eventually('the lease too old to act under', async () => holder.current() === undefined);
    expect(await holder.ensure(), 'renewed, the same lease').to.deep.equal(lease);
    await holder.fenced((trx) => trx.raw('select 1'));
    // Taken by another holder once expired: the write fenced by it fails.
    await eventually('its expiry', async () =>
      new DatabaseLeases(two.handles[1]).acquire(lease.name, 'other', 60_000),
    );
    const refused = await holder
      .fenced((trx) => trx.raw('select 1'))
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(isLeaseLost(refused), String(refused)).to.equal(true);
  });
});
