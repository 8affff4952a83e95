import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import type { Kernel } from '../../../services/kernel.ts';
import { Catalog, catalogEntrySchema } from '../../../services/gateway/catalog.ts';
import { RetryLater } from '../../../services/gateway/retry-later.ts';
import { Warmup } from '../../../services/gateway/warmup.ts';
import { eventually } from '../../support/eventually.ts';
import { describeEachDatabase, openTestKernel, quietLogger, stickyDatabase } from '../../support/kernel.ts';
import { stubDirectory, StubProber } from './stub-prober.ts';

/** database.leaseSeconds: a verification's lease lasts 3 s unrenewed, renewed every second. */
const LEASE_SECONDS = 3;
const entryOf = (id: string, version = '1.0.0') =>
  catalogEntrySchema.parse({
    id,
    title: id,
    registry: 'npm',
    package: `sigil-test-${id}`,
    version,
    entry: { bin: id },
  });
const CATALOG = new Catalog([entryOf('first'), entryOf('second')]);

/**
 * Scale-out (issue #29, WP6): the gateway's jobs on two replicas of one database. A server is
 * verified by one replica at a time, the others waiting for its verdict (a dead holder's taken over
 * once its lease runs out); the daily refresh runs on one replica a day; a replica starting takes the
 * verdicts already recorded and only installs their pins.
 */
describeEachDatabase('gateway jobs across replicas', (database) => {
  let sticky: ReturnType<typeof stickyDatabase>;
  let clock: ManualClock;
  let kernels: Kernel[];
  let warmups: Warmup[];

  /** A gateway process on the shared database (a replica of its own). */
  const start = async () => {
    const kernel = await openTestKernel({
      database: sticky.database,
      clock,
      config: { database: { shared: true, leaseSeconds: LEASE_SECONDS } },
    });
    kernels.push(kernel);
    return kernel;
  };
  /** The server directory and warmup of a gateway on `kernel`, probing with a prober of its own. */
  const gateway = (kernel: Kernel, options: { catalog?: Catalog; verificationWaitMs?: number } = {}) => {
    const prober = new StubProber();
    const catalog = options.catalog ?? CATALOG;
    const servers = stubDirectory(kernel, catalog, prober, {
      ...(options.verificationWaitMs !== undefined && { verificationWaitMs: options.verificationWaitMs }),
    });
    const warmup = new Warmup({
      catalog,
      servers,
      registries: () => new Map(),
      clock,
      logger: quietLogger(),
      refresh: { enabled: true, at: '03:00', pollSeconds: 60 },
      leases: kernel.leases,
      holder: kernel.replica.id,
      leaseMs: LEASE_SECONDS * 1000,
    });
    warmups.push(warmup);
    return { prober, servers, warmup };
  };
  const verifications = async (id: string) =>
    Number(
      (
        (await kernels[0]!.db('gateway_servers').where({ server_id: id }).first('verifications')) as {
          verifications: number | string;
        }
      ).verifications,
    );

  beforeEach(async () => {
    sticky = stickyDatabase(database);
    clock = new ManualClock(new Date('2026-11-22T02:59:00Z'));
    kernels = [];
    warmups = [];
  });
  afterEach(async () => {
    await Promise.all(warmups.map((warmup) => warmup.stop()));
    for (const kernel of kernels.reverse()) await kernel.close();
    await sticky.drop();
  });

  it('verifies a server once when two replicas need it at once: the second waits for the verdict and takes it', async () => {
    const [a, b] = [gateway(await start()), gateway(await start())];
    const held = a.prober.hold();
    const onA = a.servers.admit('first');
    await held.started;
    // B asks while A verifies: it looks for the lease again and again, and probes nothing.
    let looks = 0;
    const look = (query: { sql: string }) => void (/\binsert into [`"]leases[`"]/.test(query.sql) && looks++);
    kernels[1]!.db.on('query', look);
    let answered = false;
    const onB = b.servers.admit('first').finally(() => (answered = true));
    try {
      await eventually('B waiting for A’s verification', async () => looks >= 3);
    } finally {
      kernels[1]!.db.off('query', look);
    }
    expect(answered, 'B answers only once A has recorded a verdict').to.equal(false);
    held.release();
    const [fromA, fromB] = await Promise.all([onA, onB]);
    expect(fromB.details).to.deep.equal(fromA.details);
    expect(fromB.details.tier).to.equal('tools_listed');
    expect([a.prober.probes, b.prober.probes]).to.deep.equal([1, 0]);
    expect(await verifications('first')).to.equal(1);
  });

  it('takes over the verification of a replica that died holding it, once its lease runs out', async () => {
    const [a, b] = [await start(), gateway(await start())];
    // A replica killed mid-verification: its lease taken, never renewed nor released.
    expect(await a.leases.acquire('gateway:verify:first', 'killed-replica', LEASE_SECONDS * 1000)).to.include(
      {
        fence: 1,
      },
    );
    const asked = performance.now();
    const { details } = await b.servers.admit('first');
    expect(performance.now() - asked, 'not before the lease ran out').to.be.at.least(
      LEASE_SECONDS * 1000 - 500,
    );
    expect(details.tier).to.equal('tools_listed');
    expect(b.prober.probes).to.equal(1);
    expect(await verifications('first')).to.equal(1);
  });

  it('answers 503 (retry later), probing nothing, when a live replica’s verification outlasts the wait', async () => {
    const [a, b] = [await start(), gateway(await start(), { verificationWaitMs: 600 })];
    await a.leases.acquire('gateway:verify:first', 'slow-replica', 60_000);
    const refusal = await b.servers.admit('first').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refusal).to.be.instanceOf(RetryLater);
    expect((refusal as RetryLater).code).to.equal('unavailable');
    expect((refusal as RetryLater).message).to.match(/being verified by another gateway replica/);
    expect(b.prober.probes).to.equal(0);
  });

  it('runs the daily refresh on one replica a day, each server verified once', async () => {
    const [a, b] = [gateway(await start()), gateway(await start())];
    const due = () => Promise.all([a.warmup.refreshDue(), b.warmup.refreshDue()]);
    const probes = () => a.prober.probes + b.prober.probes;
    expect(await due(), 'not before 03:00').to.deep.equal([false, false]);
    for (const day of ['2026-11-22', '2026-11-23']) {
      clock.set(new Date(`${day}T03:00:01Z`));
      expect((await due()).filter(Boolean), day).to.have.length(1);
      clock.advance(3_600_000);
      expect(await due(), `${day}, later`).to.deep.equal([false, false]);
    }
    expect(probes(), 'two servers, two days').to.equal(4);
    expect([a.warmup.nextRefresh, b.warmup.nextRefresh].map((when) => when?.toISOString())).to.deep.equal([
      '2026-11-24T03:00:00.000Z',
      '2026-11-24T03:00:00.000Z',
    ]);
  });

  it('warms replicas starting together with one verification of each server; one starting later installs the pins recorded', async () => {
    const [a, b] = [gateway(await start()), gateway(await start())];
    const together = await Promise.all([a.warmup.run('start-up'), b.warmup.run('start-up')]);
    expect(together).to.deep.equal([
      { servers: 2, verified: 2 },
      { servers: 2, verified: 2 },
    ]);
    expect(a.prober.probes + b.prober.probes).to.equal(2);
    const later = gateway(await start());
    expect(await later.warmup.run('start-up')).to.deep.equal({ servers: 2, verified: 2 });
    expect(later.prober.probes, 'the recorded verdicts taken').to.equal(0);
    expect(later.prober.prepared).to.deep.equal(['first@1.0.0', 'second@1.0.0']);
  });

  it('verifies anew at start-up a server whose catalog entry changed, and every server once a refresh time passed', async () => {
    await gateway(await start()).warmup.run('start-up');
    const changed = gateway(await start(), {
      catalog: new Catalog([entryOf('first'), entryOf('second', '^1.0.0')]),
    });
    await changed.warmup.run('start-up');
    expect(changed.prober.probes, 'the entry with another version range').to.equal(1);
    // 03:00 passed and no replica refreshed (they were all down): a replica starting verifies all.
    clock.set(new Date('2026-11-22T03:00:01Z'));
    const next = gateway(await start());
    await next.warmup.run('start-up');
    expect(next.prober.probes).to.equal(2);
  });
});
