import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { openDatabase, type Database } from '../../../core/db/database.ts';
import type { Serving } from '../../../services/serve.ts';
import { freePort, startSigil } from '../../support/cli.ts';
import { eventually } from '../../support/eventually.ts';
import {
  describeEachDatabase,
  stickyDatabase,
  TEST_GATEWAY_SECRET_KEY,
  TEST_SHARED_SETTINGS,
  withTestKeyMaterial,
  type TestDatabase,
} from '../../support/kernel.ts';
import { ProbeWorld, probeEntry } from './support.ts';

/** A server whose verification takes a while: its smoke test sleeps 2 s. */
const slowEntry = { ...probeEntry, id: 'slow', smokeTest: { tool: 'sleep', arguments: { ms: 2000 } } };

type Gateway = Serving & { url: string };

/**
 * Scale-out (issue #29, WP6), with real gateways: real package installs from a registry, real
 * sandboxed probes, one database. Gateways starting together verify each server once; a gateway
 * killed (SIGKILL) in the middle of a verification is taken over by another once its lease runs out.
 */
describeEachDatabase('gateway verification across real replicas', (fresh: TestDatabase) => {
  let world: ProbeWorld;
  let sticky: ReturnType<typeof stickyDatabase>;
  let db: Database;
  let gateways: Gateway[];

  before(async function () {
    this.timeout(120_000);
    world = await ProbeWorld.start({ servers: [slowEntry] });
  });
  after(async () => {
    await world?.stop();
  });
  beforeEach(async () => {
    sticky = stickyDatabase(fresh);
    gateways = [];
  });
  afterEach(async () => {
    await Promise.all(gateways.map((gateway) => gateway.stop()));
    await db?.destroy();
    await sticky.drop();
  });

  const gateway = async (settings: { warmupAtStart: boolean }) => {
    const started = await world.gateway(sticky.database, settings);
    gateways.push(started);
    return started;
  };
  /** A handle on the shared database, as an operator's psql or sqlite3 has it. */
  const open = async () => {
    const { url, schema } = sticky.database.fresh();
    db = await openDatabase({ url, ...(schema !== undefined && { schema }) });
    return db;
  };
  const verifications = async () =>
    Object.fromEntries(
      (
        (await db('gateway_servers').select('server_id', 'verifications')) as {
          server_id: string;
          verifications: number | string;
        }[]
      ).map((row) => [row.server_id, Number(row.verifications)]),
    );
  const call = (on: Gateway, serverId: string) =>
    fetch(`${on.url}/api/servers/${serverId}/tools/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { message: `via ${on.url}` } }),
    });

  it('warms two gateways starting together with one verification of each server, and both call them', async function () {
    this.timeout(180_000);
    const a = await gateway({ warmupAtStart: true });
    const b = await gateway({ warmupAtStart: true });
    const outcomes = await Promise.all([a.warmedUp, b.warmedUp]);
    expect(outcomes).to.deep.equal([
      { servers: 3, verified: 3 },
      { servers: 3, verified: 3 },
    ]);
    await open();
    expect(await verifications()).to.deep.equal({ probe: 1, 'probe-locked': 1, slow: 1 });
    for (const on of [a, b]) {
      const answer = await call(on, 'probe');
      expect(answer.status, await answer.clone().text()).to.equal(200);
    }
  });

  it('takes over the verification of a gateway killed in the middle of it, once its lease runs out', async function () {
    this.timeout(180_000);
    // The database exists with its tables before the other process opens it.
    const b = await gateway({ warmupAtStart: false });
    await open();
    const killed = await killableGateway(world, sticky.database);
    const lease = await eventually(
      'the other process verifying the slow server',
      async () =>
        (await db('leases').where({ name: 'gateway:verify:slow' }).first()) as
          { holder: string; fence: number | string } | undefined,
      60_000,
    );
    killed.child.kill('SIGKILL');
    await killed.exited;
    expect(await verifications(), 'it recorded nothing').to.deep.equal({});
    const answer = await call(b, 'slow');
    expect(answer.status, await answer.clone().text()).to.equal(200);
    expect(await verifications()).to.deep.equal({ slow: 1 });
    const taken = (await db('leases').where({ name: 'gateway:verify:slow' }).first()) as {
      holder: string;
      fence: number | string;
    };
    expect(taken.holder).to.not.equal(lease.holder);
    expect(Number(taken.fence)).to.equal(Number(lease.fence) + 1);
  });
});

/**
 * `sigil gateway`, the real command in a process of its own, on `database` with the slow server
 * alone in its catalog, warming it up at start with a lease of 3 s.
 */
async function killableGateway(world: ProbeWorld, database: TestDatabase) {
  const dir = mkdtempSync(join(world.dir, 'killed-'));
  // The sandbox user reaches its state directory below this one.
  chmodSync(dir, 0o755);
  const catalogFile = join(dir, 'catalog.json');
  writeFileSync(catalogFile, JSON.stringify({ servers: [slowEntry] }));
  const { url, schema } = database.fresh();
  writeFileSync(
    join(dir, 'sigil.config.json'),
    JSON.stringify({
      database: { leaseSeconds: 3 },
      // What a replica on a shared database must be given (it refuses to start without).
      runtime: { publicUrl: TEST_SHARED_SETTINGS.runtime.publicUrl },
      gateway: {
        includeDefaultCatalog: false,
        catalogFile,
        warmupAtStart: true,
        publicUrl: TEST_SHARED_SETTINGS.gateway.publicUrl,
      },
      plugins: world.plugins(join(dir, 'sandboxes')).map(withTestKeyMaterial),
    }),
  );
  return startSigil(['gateway'], /^gateway +http/m, {
    cwd: dir,
    env: {
      SIGIL_CONFIG: '',
      // A PostgreSQL test database is a schema: the other process finds its tables there.
      DATABASE_URL:
        schema === undefined ? url : `${url}?options=${encodeURIComponent(`-c search_path=${schema}`)}`,
      GATEWAY_PORT: String(await freePort()),
      GATEWAY_SECRET_KEY: TEST_GATEWAY_SECRET_KEY,
    },
    timeoutMs: 60_000,
  });
}
