import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import { ChatService } from '../../../services/runtime/chat/chat.ts';
import { newWallet } from '../../core/auth/support.ts';
import { refuseCharges, setOnChain } from './ledger/support.ts';
import { describeEachDatabase } from '../../support/kernel.ts';
import type { SseEvent } from './chat-support.ts';
import { inProcessGateway, recording } from './chat-in-process.ts';
import { pluginsWithLocalProvider, Stack } from './support.ts';

const TTL_SECONDS = 120;

/**
 * Issue 21 review: a chat's hold moved its expiry only when its amount grew, so a tool batch longer
 * than ledger.holdTtlSeconds (16 calls × 60 s by default, against 600 s) lost its hold to the expiry
 * sweep while the chat still ran, and concurrent chats could spend the same balance. The gateway here
 * is an official-SDK MCP server in process whose one tool lets the injected clock pass the TTL and
 * runs the sweep while the call is in flight. And a settlement that failed (a database fault) left
 * the hold to the sweep, which released it: the work was served free.
 */
describe('runtime chat: a running chat keeps its hold, and a failed charge is not served free', function () {
  this.timeout(120_000);

  describeEachDatabase('chat hold expiry', (database) => {
    let dir: string;
    let stack: Stack;

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-chat-expiry-'));
      stack = await Stack.start({
        database,
        config: {
          vault: { persistenceDir: dir },
          ledger: { minimumBalance: '0', holdTtlSeconds: TTL_SECONDS } as never,
          runtime: { providerApiKey: 'sk-internal-operator-key-5b1e', chat: { internalKey: true } as never },
          plugins: pluginsWithLocalProvider(),
        },
      });
    });
    after(async () => {
      await stack?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('a tool batch that outlasts holdTtlSeconds keeps its hold: the sweep does not release it', async () => {
      const wallet = newWallet();
      const ledger = stack.runtime.ledger;
      await setOnChain(ledger.ledger, wallet.address, 1_000_000n);
      const agentId = (await ledger.agents.create(wallet.address, { name: 'a', model: 'sigil-echo' })).id;
      const held: (bigint | undefined)[] = [];
      const chat = new ChatService({
        ...stack.runtime.chat.deps(),
        gateway: inProcessGateway({
          slow__wait: {
            run: async () => {
              // Each call takes TTL − 1 s; the batch of two outlasts the TTL. A sweep at each call's end.
              stack.clock.advance((TTL_SECONDS - 1) * 1000);
              await ledger.holds.releaseExpired();
              held.push((await ledger.ledger.balance(wallet.address)).heldSpend);
            },
          },
        }),
      });
      const principal: AuthPrincipal = { address: wallet.address, method: 'jwt', operator: false };
      const session = await chat.openSession(wallet.address, agentId, { servers: ['slow'] });
      stack.clock.advance(1000);
      const prepared = await chat.prepare(principal, agentId, session.id, {
        content: 'use tool slow__wait then use tool slow__wait',
      });
      const events: SseEvent[] = [];
      // One batch of two calls, reserved before it starts, then running 2 × TTL − 2 s.
      await chat.run(principal, prepared, recording(events));
      expect(events.map((e) => e.event)).to.include.members(['tool-result', 'done']);
      expect(held).to.have.length(2);
      for (const amount of held) expect(amount! > 0n).to.equal(true, 'the hold was released mid-chat');
      const cost = events.find((e) => e.event === 'cost')!.data;
      expect(cost.charged).to.equal(cost.platformCost);
      expect(await ledger.ledger.balance(wallet.address)).to.include({ heldSpend: 0n });
    });

    it('a settlement that keeps failing leaves the real cost on the hold: the sweep charges it, once', async () => {
      const wallet = newWallet();
      const ledger = stack.runtime.ledger;
      await setOnChain(ledger.ledger, wallet.address, 1_000_000n);
      const agentId = (await ledger.agents.create(wallet.address, { name: 'a', model: 'sigil-echo' })).id;
      const chat = stack.runtime.chat;
      const principal: AuthPrincipal = { address: wallet.address, method: 'jwt', operator: false };
      const session = await chat.openSession(wallet.address, agentId, {});
      const prepared = await chat.prepare(principal, agentId, session.id, { content: 'hello there world' });
      const fault = await refuseCharges(stack.kernel.db, wallet.address);
      const events: SseEvent[] = [];
      await chat.run(principal, prepared, recording(events));
      const cost = events.find((e) => e.event === 'cost')!.data;
      expect(cost).to.include({ charged: '0' });
      expect(cost.error).to.include({ code: 'internal' });
      const platformCost = BigInt(cost.platformCost as string);
      expect(platformCost > 0n).to.equal(true);
      // Still held (the work is not given back), with its cost due at the next sweep.
      expect((await ledger.ledger.balance(wallet.address)).heldSpend > 0n).to.equal(true);
      await fault.heal();
      stack.clock.advance((TTL_SECONDS + 1) * 1000);
      expect(await ledger.holds.releaseExpired()).to.be.at.least(1);
      const balance = await ledger.ledger.balance(wallet.address);
      expect(balance).to.include({ heldSpend: 0n, unsettledSpend: platformCost });
      expect(await ledger.holds.releaseExpired()).to.equal(0);
      expect((await ledger.ledger.balance(wallet.address)).unsettledSpend).to.equal(platformCost);
      expect((await ledger.ledger.audit(wallet.address)).mismatches).to.deep.equal([]);
    });
  });
});
