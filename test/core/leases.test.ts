import { expect } from 'chai';
import { isLeaseLost } from '@sigil/plugin-api';
import { databaseNowMs, dialectOf, type Database } from '../../core/db/database.ts';
import { DatabaseLeases, type Lease } from '../../core/db/leases.ts';
import { eventually } from '../support/eventually.ts';
import { describeEachDatabase, openTwoHandles, SHARED_REPLICAS, type TwoHandles } from '../support/kernel.ts';

/** Short enough to wait out (by the database's clock), long enough for the statements between. */
const TTL_MS = 400;

describeEachDatabase('core: leases', (database) => {
  let two: TwoHandles;
  /** Two handles on one database, as two replicas have, and the leases on each. */
  let handles: [Database, Database];
  let leases: [DatabaseLeases, DatabaseLeases];

  beforeEach(async () => {
    two = await openTwoHandles(database);
    handles = two.handles;
    leases = [new DatabaseLeases(handles[0]), new DatabaseLeases(handles[1])];
    await handles[0].schema.createTable('guarded', (t) => {
      t.string('id').primary();
      t.bigInteger('fence').notNullable();
    });
  });

  afterEach(() => two.close());

  /** Resolves once `lease` has expired by the database's clock (nobody renewing it). */
  const expired = (lease: Lease) =>
    eventually(`${lease.name} expired`, async () => {
      const row = (await handles[1]('leases')
        .where({ name: lease.name })
        .first({ expires_at: 'expires_at', now: databaseNowMs(handles[1]) })) as {
        expires_at: number | string;
        now: number | string;
      };
      return Number(row.expires_at) <= Number(row.now);
    });
  const write = (trx: Database, id: string, lease: Lease) =>
    trx('guarded').insert({ id, fence: lease.fence });

  it('gives a lease to exactly one of the holders racing for it', async () => {
    const racing = Array.from({ length: 10 }, (_, at) =>
      leases[at % 2]!.acquire('race', `holder-${at}`, 60_000),
    );
    const taken = (await Promise.all(racing)).filter((lease) => lease !== undefined);
    expect(taken).to.have.length(1);
    expect(taken[0]).to.include({ name: 'race', fence: 1, ttlMs: 60_000 });
    expect(await leases[0].acquire('race', taken[0]!.holder, 60_000), 'not even its holder again').to.equal(
      undefined,
    );
  });

  it('is taken over once its holder stops renewing, with a greater fence; the old holder can neither renew nor write', async () => {
    const first = (await leases[0].acquire('job', 'a', TTL_MS))!;
    expect(await leases[1].acquire('job', 'b', TTL_MS)).to.equal(undefined);
    expect(await leases[0].renew(first)).to.equal(true);
    await expired(first);
    const second = (await leases[1].acquire('job', 'b', 60_000))!;
    expect(second).to.include({ holder: 'b', fence: 2 });
    expect(await leases[0].renew(first)).to.equal(false);
    const stale = await leases[0]
      .fenced(first, (trx) => write(trx, 'stale', first))
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(isLeaseLost(stale), String(stale)).to.equal(true);
    await leases[1].fenced(second, (trx) => write(trx, 'current', second));
    expect(await handles[0]('guarded').select('id')).to.deep.equal([{ id: 'current' }]);
    // Released by a holder it no longer is, it stays with its new holder.
    await leases[0].release(first);
    expect(await leases[1].renew(second)).to.equal(true);
  });

  it('a released lease can be taken at once, and its fence goes on growing', async () => {
    const first = (await leases[0].acquire('account', 'a', 60_000))!;
    await leases[0].release(first);
    expect(await leases[0].renew(first)).to.equal(false);
    const second = (await leases[1].acquire('account', 'b', 60_000))!;
    expect(second.fence).to.equal(first.fence + 1);
  });

  it('renews for another ttl, and for a ttl of its own when given one', async () => {
    const lease = (await leases[0].acquire('long', 'a', TTL_MS))!;
    expect(await leases[0].renew(lease, 60_000)).to.equal(true);
    const row = (await handles[0]('leases')
      .where({ name: 'long' })
      .first({ expires_at: 'expires_at', now: databaseNowMs(handles[0]) })) as Record<
      string,
      number | string
    >;
    expect(Number(row.expires_at) - Number(row.now)).to.be.within(50_000, 60_000);
  });

  it("keeps the lease from changing hands until a fenced transaction ends: the holder's write comes first", async () => {
    const lease = (await leases[0].acquire('guard', 'a', TTL_MS))!;
    const order: string[] = [];
    let proceed: () => void = () => undefined;
    const inside = new Promise<void>((entered) => {
      void leases[0]
        .fenced(lease, async (trx) => {
          entered();
          await new Promise<void>((resolve) => (proceed = resolve));
          await write(trx, 'holder', lease);
        })
        .then(() => order.push('holder committed'));
    });
    await inside;
    await expired(lease);
    const takeover = leases[1].acquire('guard', 'b', 60_000).then((taken) => {
      order.push('taken over');
      return taken;
    });
    if (dialectOf(handles[0]) === 'postgres') {
      // The takeover waits on the lease row the fenced transaction locked.
      await eventually('the takeover waiting on the lock', async () => {
        const waiting = (await handles[0].raw(
          "select count(*) as n from pg_stat_activity where wait_event_type = 'Lock' and query like 'insert into \"leases\"%'",
        )) as { rows: { n: string }[] };
        return Number(waiting.rows[0]!.n) > 0;
      });
    }
    proceed();
    expect((await takeover)?.fence).to.equal(2);
    expect(order).to.deep.equal(['holder committed', 'taken over']);
    expect(await handles[0]('guarded').select('id')).to.deep.equal([{ id: 'holder' }]);
  });

  it('is free at once when its holder is a replica that died (before it expires), never while that replica lives', async () => {
    const [holder, other] = [await two.register(handles[0]), await two.register(handles[1])];
    const held = new DatabaseLeases(handles[0], holder);
    const taking = new DatabaseLeases(handles[1], other);
    expect(held.holder).to.equal(holder.id);
    const first = (await held.acquire('account', held.holder, 600_000))!;
    expect(await taking.acquire('account', taking.holder, 600_000), 'its holder lives').to.equal(undefined);
    // Killed: its last heartbeat is older than deadAfterMs, by the database's clock.
    await handles[0]('replicas')
      .where({ id: holder.id })
      .update({
        heartbeat_at: handles[0].raw('? - ?', [databaseNowMs(handles[0]), SHARED_REPLICAS.deadAfterMs + 1]),
      });
    const second = (await taking.acquire('account', taking.holder, 600_000))!;
    expect(second).to.include({ holder: other.id, fence: first.fence + 1 });
    expect(await held.renew(first), 'the dead holder’s lease is lost').to.equal(false);
    // A holder that is no replica (a plugin's own name) is judged by expiry alone.
    expect(await taking.acquire('other', 'not-a-replica', 600_000)).to.include({ fence: 1 });
    expect(await held.acquire('other', held.holder, 600_000)).to.equal(undefined);
  });

  it('forgets the expired leases under a prefix, and only those', async () => {
    const old = (await leases[0].acquire('job:1', 'a', TTL_MS))!;
    await leases[0].acquire('job:2', 'a', 60_000);
    await leases[0].acquire('other:1', 'a', 1);
    await expired(old);
    expect(await leases[0].forgetExpired('job:')).to.equal(1);
    const names = (await handles[0]('leases').orderBy('name').select('name')) as { name: string }[];
    expect(names.map((row) => row.name)).to.deep.equal(['job:2', 'other:1']);
  });
});
