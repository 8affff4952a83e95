import { expect } from 'chai';
import { GatewayToolSession } from '../../../services/runtime/chat/tools.ts';
import { gatewayScopeOf } from '../../../services/runtime/gateway-client.ts';
import { newWallet } from '../../core/auth/support.ts';
import { describeEachDatabase } from '../../support/kernel.ts';
import { modernEchoEntry, modernEchoPackage, ProbeWorld } from '../gateway/support.ts';
import { Stack } from './support.ts';

describe('runtime gateway client: the gateway scope of a chat session or a canvas run', () => {
  const owner = {
    wallet: '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01',
    id: '6f1c2f7e-58f4-4d8e-9a51-1f0b9e4c2d3a',
  };

  it('keeps the X-MCP-Session ids chat and canvas had before they shared one helper', () => {
    // The gateway keeps a session's enabled servers under its id: a changed digest would orphan them.
    expect(gatewayScopeOf('chat', owner)).to.deep.equal({
      wallet: owner.wallet,
      session: 'chat.1kkWrMM_i4iFtXZQBCoHlRrwOyAviDdaQbXRNAhPFmE',
    });
    expect(gatewayScopeOf('canvas', owner).session).to.equal(
      'canvas.T8C-JwFleixGZO1bKScA3Fp1rultjCYAhVqsvBN6UVo',
    );
  });

  it('gives one id per wallet and owner id, whatever the address case, never the owner id itself', () => {
    const lower = { ...owner, wallet: owner.wallet.toLowerCase() };
    expect(gatewayScopeOf('canvas', lower).session).to.equal(gatewayScopeOf('canvas', owner).session);
    const sessions = new Set([
      gatewayScopeOf('canvas', owner).session,
      gatewayScopeOf('chat', owner).session,
      gatewayScopeOf('canvas', { ...owner, id: 'another-run' }).session,
      gatewayScopeOf('canvas', { ...owner, wallet: `0x${'1'.repeat(40)}` }).session,
    ]);
    expect(sessions.size).to.equal(4);
    for (const session of sessions) expect(session).to.not.include(owner.id);
  });
});

/**
 * The tool loop's client speaks MCP 2026-07-28 without a handshake: the gateway's public
 * `server/discover` answer is asked once and adopted by later connections while its `ttlMs` lasts.
 */
describeEachDatabase(
  'runtime gateway client: server/discover reused while its cache hint lasts',
  (database) => {
    const wallet = newWallet().address;
    const signal = new AbortController().signal;
    /** Opens a tool session (no servers: it only lists), closes it, and counts its POSTs to /mcp. */
    const postsToOpen = async (stack: Stack, session: string): Promise<number> => {
      const before = stack.gatewayRequests().filter((r) => r === 'POST /mcp').length;
      const tools = await GatewayToolSession.open({
        gateway: stack.runtime.gateway,
        path: 'delegated',
        scope: { wallet, session },
        servers: [],
        payments: undefined,
        signal,
      });
      expect(tools.definitions().map((tool) => tool.name)).to.include('gateway_search_servers');
      await tools.close();
      return stack.gatewayRequests().filter((r) => r === 'POST /mcp').length - before;
    };

    it('discover and list on the first connection, only list on the next; discover again once ttlMs passed', async () => {
      const stack = await Stack.start({ database, config: { gateway: { mcp: { listTtlSeconds: 60 } } } });
      try {
        expect(await postsToOpen(stack, 'first')).to.equal(2);
        expect(await postsToOpen(stack, 'second')).to.equal(1);
        stack.clock.advance(59_000);
        expect(await postsToOpen(stack, 'third')).to.equal(1);
        stack.clock.advance(1_000);
        expect(await postsToOpen(stack, 'fourth')).to.equal(2);
        expect(await postsToOpen(stack, 'fifth')).to.equal(1);
      } finally {
        await stack.close();
      }
    });

    it('keeps no answer whose ttlMs is 0', async () => {
      const stack = await Stack.start({ database, config: { gateway: { mcp: { listTtlSeconds: 0 } } } });
      try {
        expect(await postsToOpen(stack, 'first')).to.equal(2);
        expect(await postsToOpen(stack, 'second')).to.equal(2);
      } finally {
        await stack.close();
      }
    });
  },
);

/**
 * A gateway tool that needs a client capability the runtime's tool loop does not declare (the SDK v2
 * server behind asks for elicitation): the gateway answers -32021, which the runtime hands the model as
 * a tool error, unbilled, as it did when the gateway sent a tool error itself.
 */
describe('runtime gateway client: a tool that needs a capability the runtime does not declare', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  before(async () => {
    world = await ProbeWorld.start({ packages: [modernEchoPackage], servers: [modernEchoEntry] });
  });
  after(() => world?.stop());

  describeEachDatabase('the modern echo server behind the gateway', (database) => {
    it('is a tool error naming the capability, not billed, and the session goes on', async () => {
      const stack = await Stack.start({
        database,
        config: {
          gateway: { includeDefaultCatalog: false, catalogFile: world.catalogFile },
          plugins: world.plugins(),
        },
      });
      const signal = new AbortController().signal;
      try {
        const tools = await GatewayToolSession.open({
          gateway: stack.runtime.gateway,
          path: 'delegated',
          scope: { wallet: newWallet().address, session: 'needs-input' },
          servers: ['modern'],
          payments: undefined,
          signal,
        });
        try {
          const refused = await tools.call('modern__greet', {}, signal);
          expect(refused).to.deep.include({ isError: true, billed: false });
          expect(refused.content).to.include('modern__greet').and.include('elicitation');
          expect(await tools.call('modern__echo', { message: 'still here' }, signal)).to.deep.include({
            content: 'still here',
            isError: false,
            billed: true,
          });
        } finally {
          await tools.close();
        }
      } finally {
        await stack.close();
      }
    });
  });
});
