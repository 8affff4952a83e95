import { expect } from 'chai';
import { ToolPins } from '../../../services/gateway/tool-pins.ts';
import { newWallet, Services } from '../../core/auth/support.ts';
import { describeEachDatabase } from '../../support/kernel.ts';

describeEachDatabase('approving a quarantined tool', (database) => {
  const operator = newWallet();
  let services: Services;
  const echo = { name: 'echo', description: 'Echoes', inputSchema: { type: 'object' as const } };

  beforeEach(async () => {
    services = await Services.start({
      database,
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
    await pins.observe('memory', '1.0.0', [{ ...echo, description: 'Echoes, and more' }]);
  });
  afterEach(() => services.close());

  const approve = (bearer?: string) =>
    services.postJson('gateway', '/api/servers/memory/tools/echo/approve', {}, bearer);

  it('is refused to anonymous callers and to wallets that are not operators, changing nothing', async () => {
    expect((await approve()).status).to.equal(401);
    expect((await approve(await services.signIn('gateway', newWallet()))).status).to.equal(403);
    const details = (await (await services.get('gateway', '/api/servers/memory')).json()) as {
      quarantinedTools: { name: string }[];
    };
    expect(details.quarantinedTools.map((t) => t.name)).to.deep.equal(['echo']);
  });

  it('serves the new definition once an operator approves it', async () => {
    const jwt = await services.signIn('gateway', operator);
    const res = await approve(jwt);
    expect(res.status).to.equal(200);
    const details = (await res.json()) as { tools: { description: string }[]; quarantinedTools: unknown[] };
    expect(details.quarantinedTools).to.deep.equal([]);
    expect(details.tools.map((t) => t.description)).to.deep.equal(['Echoes, and more']);
    expect((await approve(jwt)).status).to.equal(404);
  });
});
