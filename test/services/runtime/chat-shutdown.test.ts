import { expect } from 'chai';
import { newWallet } from '../../core/auth/support.ts';
import { setOnChain } from './ledger/support.ts';
import { describeEachDatabase } from '../../support/kernel.ts';
import { runtimeClient } from './chat-support.ts';
import { internalKeyStack, type Stack } from './support.ts';

/**
 * A chat streams on after its HTTP handler returned. Closing the runtime (what `serve`'s stop does
 * before the database closes) waits for it, so its hold is settled and charged while the database is
 * still open; before, the settlement could run on a closed database, as an unhandled rejection.
 */
describe('runtime chat: shutdown', function () {
  this.timeout(120_000);

  describeEachDatabase('a chat running when the runtime closes', (database) => {
    let stack: Stack;
    let close: () => Promise<void>;
    before(async () => {
      ({ stack, close } = await internalKeyStack(database, {
        operatorKey: 'sk-internal-operator-key-5d1c',
        chat: { maxOutputTokens: 20 },
      }));
    });
    after(() => close?.());

    it('is settled and charged before close() resolves, and nothing escapes as an unhandled rejection', async () => {
      const unhandled: unknown[] = [];
      const record = (reason: unknown) => unhandled.push(reason);
      process.on('unhandledRejection', record);
      try {
        const wallet = newWallet();
        const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
        const ledger = stack.runtime.ledger.ledger;
        await setOnChain(ledger, wallet.address, 1_000_000n);
        const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-slow' })).body
          .id as string;
        const session = (await client.json('POST', `/agents/${agentId}/sessions`, {})).body.id as string;
        const res = await client.send('POST', `/agents/${agentId}/sessions/${session}/messages`, {
          content: 'count',
        });
        const reader = (res.body as ReadableStream<Uint8Array>).getReader();
        let streamed = '';
        while (!streamed.includes('event: text-delta')) {
          const { value, done } = await reader.read();
          if (done) throw new Error('the stream ended before its first text');
          streamed += new TextDecoder().decode(value);
        }
        expect((await ledger.balance(wallet.address)).heldSpend > 0n, 'held while it streams').to.equal(true);

        await stack.runtime.close();

        const balance = await ledger.balance(wallet.address);
        expect(balance.heldSpend).to.equal(0n);
        expect(balance.unsettledSpend > 0n, 'the chat was charged').to.equal(true);
        while (!(await reader.read()).done);
        expect(unhandled).to.deep.equal([]);
      } finally {
        process.off('unhandledRejection', record);
      }
    });
  });
});
