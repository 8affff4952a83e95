import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { ProbeWorld } from '../gateway/support.ts';
import { startDevChain, type DevChain } from '../../support/chain.ts';
import { freePort } from '../../support/cli.ts';
import { describeEachDatabase, stickyDatabase, type TestDatabase } from '../../support/kernel.ts';
import { readSse, type SseEvent } from './chat-support.ts';
import { chatUser, serveChatWorld } from './chat-world.ts';

const USD = 1_000_000n;

const baseOf = (events: SseEvent[]): bigint =>
  events
    .filter((e) => e.event === 'usage')
    .reduce((sum, e) => sum + BigInt(e.data.baseLlmCost as string), 0n);

/**
 * Issue 22, point 3: a chat is charged 500 base units only for a tool call the gateway ran and
 * settled, never for one refused before it ran (no operator wallet to pay it, a refusal, a failure).
 */
describeEachDatabase('runtime chat: only tool calls the gateway ran are charged', (database) => {
  let chain: DevChain;
  let world: ProbeWorld;
  let dir: string;

  before(async function () {
    this.timeout(120_000);
    [chain, world] = await Promise.all([startDevChain(), ProbeWorld.start()]);
    dir = mkdtempSync(join(tmpdir(), 'sigil-chat-charges-'));
  });
  after(async () => {
    await world?.stop();
    await chain?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function served(
    db: TestDatabase,
    operatorKey: 'up' | null,
  ): Promise<Serving & { urls: Record<string, string> }> {
    return serveChatWorld({
      database: db,
      chain,
      world,
      vaultDir: join(dir, `vault-${operatorKey ?? 'none'}`),
      ports: { runtime: await freePort(), gateway: await freePort() },
      upConfig: (config) => config,
      ...(operatorKey === null ? { operatorKey: null } : {}),
    });
  }

  type ChatUser = Awaited<ReturnType<typeof chatUser>>;

  /** One chat turn on a fresh runtime and gateway: `content` sent in a new session with the probe server. */
  async function chatTurn(
    operatorKey: 'up' | null,
    content: string,
    check: (events: SseEvent[], user: ChatUser) => Promise<void>,
  ): Promise<void> {
    const sticky = stickyDatabase(database);
    const serving = await served(sticky.database, operatorKey);
    try {
      const user = await chatUser(serving.urls.runtime as string, chain, 2n * USD);
      const session = (
        await user.client.json('POST', `/agents/${user.agentId}/sessions`, { servers: ['probe'] })
      ).body;
      const res = await user.client.send('POST', `/agents/${user.agentId}/sessions/${session.id}/messages`, {
        content,
      });
      await check(await readSse(res), user);
    } finally {
      await serving.stop();
      await sticky.drop();
    }
  }

  /**
   * The turn's cost is the model's share plus `toolCharge`, with `billed` of its `called` tool calls
   * billed, and the user's wallet paid exactly that.
   */
  async function expectCharged(
    events: SseEvent[],
    user: ChatUser,
    { toolCharge, billed, called }: { toolCharge: bigint; billed: number; called: number },
  ): Promise<void> {
    const expected = (10n * baseOf(events) + 99n) / 100n + toolCharge;
    const cost = events.find((e) => e.event === 'cost')!.data;
    expect(cost).to.include({
      toolCalls: billed,
      platformCost: expected.toString(),
      charged: expected.toString(),
    });
    expect(events.at(-1)!.data).to.include({ toolCalls: called });
    const balance = (await user.client.json('GET', '/wallet/balance')).body;
    expect(balance).to.include({ available: (2n * USD - expected).toString(), heldSpend: '0' });
  }

  it('without an operator wallet (npm start before the fix) a paid tool is refused, and the wallet pays only the model', async function () {
    this.timeout(120_000);
    await chatTurn(null, 'use tool probe__echo with {"message":"unpaid"}', async (events, user) => {
      const result = events.find((e) => e.event === 'tool-result')!.data;
      expect(result).to.include({ name: 'probe__echo', isError: true, billed: false });
      expect(result.content).to.include('no operator wallet');
      await expectCharged(events, user, { toolCharge: 0n, billed: 0, called: 1 });
    });
  });

  it('with the operator wallet of sigil up: of a paid call, a failing call and a meta-tool, only the call that ran and settled is charged', async function () {
    this.timeout(120_000);
    await chatTurn(
      'up',
      'use tool probe__echo with {"message":"paid"} then use tool probe__fail then use tool gateway_list_enabled',
      async (events, user) => {
        expect(events.map((e) => e.event)).to.not.include('error');
        const results = Object.fromEntries(
          events.filter((e) => e.event === 'tool-result').map((e) => [e.data.name, e.data]),
        );
        expect(results.probe__echo).to.include({ isError: false, billed: true });
        expect(results.probe__echo!.paid).to.include({ amount: '500' });
        expect(results.probe__echo!.paid)
          .to.have.property('transaction')
          .that.matches(/^0x[0-9a-f]{64}$/);
        expect(results.probe__fail).to.include({ isError: true, billed: false });
        // Its payment was not settled: nothing says it was paid.
        expect(results.probe__fail).to.not.have.property('paid');
        expect(results.gateway_list_enabled).to.include({ isError: false, billed: false });
        await expectCharged(events, user, { toolCharge: 500n, billed: 1, called: 3 });
      },
    );
  });
});
