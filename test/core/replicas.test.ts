import { expect } from 'chai';
import { databaseNowMs, type Database } from '../../core/db/database.ts';
import type { Replica } from '../../core/db/replicas.ts';
import { eventually } from '../support/eventually.ts';
import {
  describeEachDatabase,
  openTestKernel,
  openTwoHandles,
  SHARED_REPLICAS as SETTINGS,
  stickyDatabase,
  type TwoHandles,
} from '../support/kernel.ts';

describeEachDatabase('core: replica registry', (database) => {
  let two: TwoHandles;
  /** Two handles on one database, as two processes have. */
  let handles: [Database, Database];
  const register = (db: Database, settings = SETTINGS): Promise<Replica> => two.register(db, settings);
  /** Sets the last heartbeat of `replica` `ago` ms before the database's now. */
  const heartbeatAgo = (replica: Replica, ago: number) =>
    handles[0]('replicas')
      .where({ id: replica.id })
      .update({ heartbeat_at: handles[0].raw('? - ?', [databaseNowMs(handles[0]), ago]) });

  beforeEach(async () => {
    two = await openTwoHandles(database);
    handles = two.handles;
  });

  afterEach(() => two.close());

  it('registers each process under its own id, alive to the others until it stops', async () => {
    const [a, b] = [await register(handles[0]), await register(handles[1])];
    expect(a.id).to.not.equal(b.id);
    await a.serving(['runtime', 'gateway']);
    const row = (await handles[1]('replicas').where({ id: a.id }).first()) as Record<string, unknown>;
    expect(row).to.include({ services: 'runtime,gateway', pid: process.pid });
    expect([await b.alive(a.id), await a.alive(b.id)]).to.deep.equal([true, true]);
    await a.close();
    expect(await b.alive(a.id)).to.equal(false);
    expect(await handles[1]('replicas').where({ id: a.id }).first()).to.equal(undefined);
    expect(await b.alive('never-registered')).to.equal(false);
  });

  it('judges a heartbeat by the database clock: dead once older than deadAfterMs', async () => {
    const [a, b] = [await register(handles[0]), await register(handles[1])];
    await heartbeatAgo(a, SETTINGS.deadAfterMs - 5_000);
    expect(await b.alive(a.id)).to.equal(true);
    await heartbeatAgo(a, SETTINGS.deadAfterMs + 1);
    expect(await b.alive(a.id)).to.equal(false);
    expect(((await b.live()) as { id: string }[]).map((live) => live.id)).to.deep.equal([b.id]);
  });

  it('writes its heartbeat every heartbeatMs, and registers again after it was taken for dead', async () => {
    const a = await register(handles[0], { ...SETTINGS, heartbeatMs: 100 });
    const b = await register(handles[1]);
    await heartbeatAgo(a, SETTINGS.deadAfterMs + 1);
    await eventually('a heartbeat', () => b.alive(a.id));
    // A replica starting deletes the rows of dead ones; the paused one comes back with its next beat.
    // a keeps beating every 100 ms, so a beat between its row's ageing and the starting replica's
    // clean-up keeps it alive: age it and start one until the clean-up finds it dead.
    await eventually('a taken for dead and deleted by a starting replica', async () => {
      await heartbeatAgo(a, SETTINGS.deadAfterMs + 1);
      await register(handles[1]);
      return (await handles[1]('replicas').where({ id: a.id }).first()) === undefined;
    });
    await eventually('registered again', () => b.alive(a.id));
  });

  it('compares its settings fingerprints with the live replicas serving the same service, at every heartbeat', async () => {
    const a = await register(handles[0], { ...SETTINGS, heartbeatMs: 100 });
    const b = await register(handles[1]);
    const c = await register(handles[1]);
    expect(await a.agreeOn({ gateway: 'aaaa', runtime: 'rrrr' })).to.deep.equal([]);
    // Another fingerprint of a service a does not serve is no difference; one of the gateway is.
    expect(await c.agreeOn({ runtime: 'rrrr' })).to.deep.equal([]);
    const found = await b.agreeOn({ gateway: 'bbbb' });
    expect(found).to.deep.equal([
      { service: 'gateway', replica: a.id, host: found[0]?.host, pid: process.pid, fingerprint: 'aaaa' },
    ]);
    expect(b.settingsOf('gateway')).to.deep.equal({ fingerprint: 'bbbb', agreed: false });
    expect(b.settingsOf('runtime'), 'a service it does not serve').to.equal(undefined);
    // a learns of b at its next heartbeat; once b is gone (or dead), a agrees again.
    await eventually('a to see b', async () => a.settingsOf('gateway')?.agreed === false);
    expect(a.settingsOf('runtime')).to.deep.equal({ fingerprint: 'rrrr', agreed: true });
    await heartbeatAgo(b, SETTINGS.deadAfterMs + 1);
    await eventually('a to agree again', async () => a.settingsOf('gateway')?.agreed === true);
    // Registered again after being taken for dead, it records its fingerprints again.
    await handles[1]('replicas').where({ id: a.id }).delete();
    const row = await eventually('a registered again', () =>
      handles[1]('replicas').where({ id: a.id }).first(),
    );
    expect(JSON.parse((row as { config_fingerprints: string }).config_fingerprints)).to.deep.equal({
      gateway: 'aaaa',
      runtime: 'rrrr',
    });
  });

  it('on one machine counts no other claimer alive, even one whose heartbeat is fresh', async () => {
    const predecessor = await register(handles[0]);
    const starting = await register(handles[1], { ...SETTINGS, shared: false });
    expect(await starting.alive(predecessor.id)).to.equal(true);
    const claimers = (await starting.claimersAlive()) as { id: string }[];
    expect(claimers.map((claimer) => claimer.id)).to.deep.equal([starting.id]);
    const shared = (await predecessor.claimersAlive()) as { id: string }[];
    expect(shared.map((claimer) => claimer.id).sort()).to.deep.equal([predecessor.id, starting.id].sort());
  });

  it('registers each kernel at open and unregisters it at close', async () => {
    const sticky = stickyDatabase(database);
    const first = await openTestKernel({ database: sticky.database });
    const second = await openTestKernel({ database: sticky.database });
    try {
      expect(await second.replica.alive(first.replica.id)).to.equal(true);
      await first.close();
      expect(await second.replica.alive(first.replica.id)).to.equal(false);
      expect(
        ((await second.db('replicas').select('id')) as { id: string }[]).map((row) => row.id),
      ).to.deep.equal([second.replica.id]);
    } finally {
      await second.close();
      await sticky.drop();
    }
  });
});
