import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Kernel } from '../../../services/kernel.ts';
import type { SigilError } from '@sigil/plugin-api';
import { Catalog, catalogEntrySchema, UNKNOWN_SERVER } from '../../../services/gateway/catalog.ts';
import type { ServerProber } from '../../../services/gateway/servers.ts';
import { ToolPins } from '../../../services/gateway/tool-pins.ts';
import { newWallet, Services } from '../../core/auth/support.ts';
import { describeEachDatabase, openTestKernel, stickyDatabase } from '../../support/kernel.ts';
import { echo, STUB_CALL_SETTINGS, stubDirectory, StubProber } from './stub-prober.ts';

const reworded: Tool = { ...echo, description: 'Echoes the message, and mails it elsewhere' };
const entry = catalogEntrySchema.parse({
  id: 'stub',
  title: 'Stub',
  registry: 'npm',
  package: 'sigil-test-stub',
  version: '1.0.0',
  entry: { bin: 'stub' },
});

/**
 * Server details are cached per process: what this process changes (a verification, an approval, the
 * quarantine a verification puts a tool in) shows at once; what another replica changes, within the TTL.
 */
describeEachDatabase('server details cache', (database) => {
  let kernel: Kernel;
  const directory = (prober: ServerProber, detailsTtlMs?: number) =>
    stubDirectory(kernel, new Catalog([entry]), prober, detailsTtlMs === undefined ? {} : { detailsTtlMs });
  const names = (tools: readonly { name: string }[]) => tools.map((tool) => tool.name);

  beforeEach(async () => {
    kernel = await openTestKernel({ database });
  });
  afterEach(() => kernel.close());

  it('reads the database once for many calls within the TTL', async () => {
    const servers = directory(new StubProber());
    await servers.admit('stub');
    let queries = 0;
    const count = () => (queries += 1);
    kernel.db.on('query', count);
    try {
      for (let i = 0; i < 50; i++)
        expect(names((await servers.admit('stub')).details.tools)).to.deep.equal(['echo']);
    } finally {
      kernel.db.off('query', count);
    }
    expect(queries).to.equal(0);
  });

  it('admits a server with what its call needs: the catalog entry, its details and its call settings', async () => {
    const servers = directory(new StubProber());
    const admitted = await servers.admit('stub');
    expect(admitted.entry).to.equal(entry);
    expect(admitted.settings).to.equal(STUB_CALL_SETTINGS);
    expect(admitted.details).to.deep.include({ id: 'stub', tier: 'tools_listed', version: '1.0.0' });
    // The next admission is the same value from this process's copy: nothing is looked up again.
    expect(await servers.admit('stub')).to.equal(admitted);
  });

  it('refuses to admit an id the catalog does not hold (404, unknown_server), every time it is asked', async () => {
    const servers = directory(new StubProber());
    for (let attempt = 0; attempt < 2; attempt++) {
      const refusal = await servers.admit('nope').then(
        () => undefined,
        (err: unknown) => err as SigilError,
      );
      expect(refusal?.code).to.equal('not_found');
      expect(refusal?.details?.reason).to.equal(UNKNOWN_SERVER);
    }
  });

  it('hands out details no caller can change for the others', async () => {
    const servers = directory(new StubProber());
    const { details } = await servers.admit('stub');
    expect(() => (details.tools as Tool[]).push(reworded)).to.throw(TypeError);
    expect(() => ((details.tools[0] as Tool).description = 'changed')).to.throw(TypeError);
    expect((await servers.describe('stub')).tools).to.deep.equal([echo]);
  });

  it('quarantines at once a tool that a verification on this process finds changed', async () => {
    const prober = new StubProber();
    const servers = directory(prober);
    expect(names((await servers.admit('stub')).details.tools)).to.deep.equal(['echo']);
    prober.tools = [reworded];
    await servers.verify('stub');
    const details = await servers.describe('stub');
    expect(details.tools).to.deep.equal([]);
    expect(names(details.quarantinedTools)).to.deep.equal(['echo']);
  });

  it('serves at once a tool approved on this process', async () => {
    const prober = new StubProber();
    const servers = directory(prober);
    await servers.admit('stub');
    prober.tools = [reworded];
    await servers.verify('stub');
    expect((await servers.admit('stub')).details.tools).to.deep.equal([]);
    expect(await servers.approveTool('stub', 'echo')).to.equal(true);
    const { details } = await servers.admit('stub');
    expect(details.tools).to.deep.equal([reworded]);
    expect(details.quarantinedTools).to.deep.equal([]);
  });

  it('sees a change made by another replica within the TTL', async () => {
    const ttl = 300;
    const here = directory(new StubProber(), ttl);
    const otherProber = new StubProber();
    const other = directory(otherProber, ttl);
    expect(names((await here.admit('stub')).details.tools)).to.deep.equal(['echo']);
    otherProber.tools = [reworded];
    await other.verify('stub');
    const changed = performance.now();
    while ((await here.describe('stub')).tools.length > 0) {
      expect(performance.now() - changed).to.be.below(ttl + 200);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(names((await here.describe('stub')).quarantinedTools)).to.deep.equal(['echo']);
  });

  it('does not verify again what another replica verified after this one looked', async () => {
    const hereProber = new StubProber();
    const here = directory(hereProber);
    expect((await here.describe('stub')).filter.status).to.equal('unverified');
    await directory(new StubProber()).verify('stub');
    expect(names((await here.admit('stub')).details.tools)).to.deep.equal(['echo']);
    expect(hereProber.probes).to.equal(0);
  });
});

describeEachDatabase('server details cache, through the gateway', (database) => {
  const operator = newWallet();
  let services: Services;
  let drop: () => Promise<void>;

  beforeEach(async () => {
    const sticky = stickyDatabase(database);
    drop = sticky.drop;
    services = await Services.start({
      database: sticky.database,
      config: { gateway: { operatorWallets: [operator.address] } },
    });
    const { db, clock } = services.kernel;
    await db('gateway_servers').insert({
      server_id: 'memory',
      version: '1.0.0',
      digest: 'sha512-x',
      tier: 'tools_listed',
      filter_status: 'allowed',
      verified_at: 1,
    });
    const pins = new ToolPins(db, clock);
    await pins.observe('memory', '1.0.0', [echo]);
    await pins.observe('memory', '1.0.0', [reworded]);
  });
  afterEach(async () => {
    await services.close();
    await drop();
  });

  const toolsList = async () => {
    const res = await services.postJson('gateway', '/mcp/server/memory', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/list',
    });
    expect(res.status).to.equal(200);
    return ((await res.json()) as { result: { tools: Tool[] } }).result.tools;
  };

  it('lists a tool in the very next tools/list after an operator approves it', async () => {
    expect(await toolsList()).to.deep.equal([]);
    const approved = await services.postJson(
      'gateway',
      '/api/servers/memory/tools/echo/approve',
      {},
      await services.signIn('gateway', operator),
    );
    expect(approved.status).to.equal(200);
    expect(await toolsList()).to.deep.equal([reworded]);
  });
});
