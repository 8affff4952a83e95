import { expect } from 'chai';
import { isLeaseLost } from '@sigil/plugin-api';
import { KitServices } from '@sigil/plugin-api/kit';

/** What a plugin under the kit gets as `coreServices.leases`: the host's promises, in one process. */
describe('plugin API kit: leases', () => {
  let services: KitServices;
  beforeEach(() => {
    services = new KitServices();
  });
  afterEach(() => services.close());

  it('gives a lease to one holder at a time, its fence growing each time it is taken', async () => {
    const leases = await services.get('leases');
    const first = (await leases.acquire('account', 'a', 60_000))!;
    expect(first).to.include({ fence: 1, holder: 'a' });
    expect(await leases.acquire('account', 'b', 60_000)).to.equal(undefined);
    expect(await leases.renew(first)).to.equal(true);
    await leases.release(first);
    const second = (await leases.acquire('account', 'b', 60_000))!;
    expect(second.fence).to.equal(2);
    expect(await leases.renew(first)).to.equal(false);
  });

  it("runs a fenced transaction on the kit's database only while the lease is held", async () => {
    const leases = await services.get('leases');
    const db = await services.get('db');
    await db.schema.createTable('guarded', (t) => t.integer('fence'));
    const lease = (await leases.acquire('job', 'a', 60_000))!;
    await leases.fenced(lease, (trx) => trx('guarded').insert({ fence: lease.fence }));
    await leases.release(lease);
    const refused = await leases
      .fenced(lease, (trx) => trx('guarded').insert({ fence: lease.fence }))
      .catch((err: unknown) => err);
    expect(isLeaseLost(refused), String(refused)).to.equal(true);
    expect(await db('guarded').select('fence')).to.deep.equal([{ fence: 1 }]);
  });
});
