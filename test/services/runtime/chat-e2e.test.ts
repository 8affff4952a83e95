import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Address } from 'viem';
import { english, generateMnemonic } from 'viem/accounts';
import type { Serving } from '../../../services/serve.ts';
import { ProbeWorld } from '../gateway/support.ts';
import { fundedAccount, sendToken, tokenBalance } from './ledger/chain-support.ts';
import { eventually } from './ledger/support.ts';
import { startDevChain, type DevChain } from '../../support/chain.ts';
import { freePort } from '../../support/cli.ts';
import { stickyDatabase, TEST_DATABASES } from '../../support/kernel.ts';
import { readSse, runtimeClient, storeAndUnlock } from './chat-support.ts';
import { serveChatWorld } from './chat-world.ts';
import { captureLogs } from '../../support/logs.ts';

const USD = 1_000_000n;

/**
 * The issue's "Done when", in process with `sigil up`'s wiring (dev chain, its rail and ledger,
 * provider-local, a vault directory) and the probe MCP server in the gateway's catalog, on both paths
 * of the tool loop: delegated (per-wallet JWTs) and operator (`runtime.chat.gatewayPath: 'operator'`,
 * every gateway request signed with ERC-8128 as `runtime.operatorKey`, the dev chain's runtime account
 * that sigil up gives it; the gateway then has delegation off and lists the operator wallet with ERC8128_ENFORCE_OPERATOR_MCP, so a tool call only gets
 * through signed by the operator).
 */
for (const gatewayPath of ['delegated', 'operator'] as const)
  describe(`runtime chat end to end (${gatewayPath} path): sigil up wiring, a tool on the gateway, x402, the ledger charge`, function () {
    this.timeout(180_000);
    const sticky = stickyDatabase(TEST_DATABASES[0]!);
    let chain: DevChain;
    let world: ProbeWorld;
    let dir: string;
    let serving: Serving | undefined;
    let ports: { runtime: number; gateway: number };
    const depositMnemonic = generateMnemonic(english);

    const logs = captureLogs();

    async function up(): Promise<{ runtime: string; gateway: string }> {
      serving = await serveChatWorld({
        database: sticky.database,
        chain,
        world,
        vaultDir: join(dir, 'vault'),
        ports,
        depositMnemonic,
        upConfig: (config) => config,
        gatewayPath,
        logs: logs.stream,
      });
      return { runtime: serving.urls.runtime as string, gateway: serving.urls.gateway as string };
    }

    before(async () => {
      [chain, world] = await Promise.all([startDevChain(), ProbeWorld.start()]);
      dir = mkdtempSync(join(tmpdir(), 'sigil-chat-e2e-'));
      ports = { runtime: await freePort(), gateway: await freePort() };
    });
    after(async () => {
      await serving?.stop();
      await world?.stop();
      await chain?.stop();
      rmSync(dir, { recursive: true, force: true });
      await sticky.drop();
    });

    it('sign in, store and unlock a key, an agent, a session, a chat that calls probe__echo (paid through x402 by the operator wallet sigil up gives the runtime), the charge; after a restart (delegated path) the key is stored but locked', async () => {
      // sigil up's runtime account pays paid tools: it holds the dev token from the chain's start.
      const operator = chain.accounts.runtime;
      const operatorFunds = await tokenBalance(chain, operator.address);
      const wallet = await fundedAccount(chain, 15n * USD);
      const urls = await up();

      const { message } = (await (
        await fetch(`${urls.runtime}/auth/challenge?address=${wallet.address}`)
      ).json()) as {
        message: string;
      };
      const verified = await fetch(`${urls.runtime}/auth/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message, signature: await wallet.signMessage({ message }) }),
      });
      const { token: jwt } = (await verified.json()) as { token: string };
      const client = runtimeClient(urls.runtime, jwt);

      // Ledger funds: a deposit to the wallet's deposit address, counted once confirmed.
      const deposit = (await client.json('GET', '/wallet/deposit-address')).body;
      await sendToken(chain, wallet, deposit.address as Address, 2n * USD);
      await eventually('the deposit counted', async () => {
        const balance = (await client.json('GET', '/wallet/balance')).body;
        return balance.available === (2n * USD).toString();
      });

      await storeAndUnlock(client, wallet as never, 'PROVIDER_API_KEY', 'sk-my-own-key');
      const agent = (await client.json('POST', '/agents', { name: 'helper', model: 'sigil-echo' })).body;
      const session = await client.json('POST', `/agents/${agent.id}/sessions`, { servers: ['probe'] });
      expect(session.status).to.equal(201);

      const res = await client.send('POST', `/agents/${agent.id}/sessions/${session.body.id}/messages`, {
        content: 'use tool probe__echo with {"message":"hi from chat"}',
        id: 'first',
      });
      expect(res.status).to.equal(200);
      const events = await readSse(res);
      const names = events.map((e) => e.event);
      expect(events.filter((e) => e.event === 'error')).to.deep.equal([]);
      expect(names).to.include.members(['tool-call', 'tool-result', 'usage', 'cost', 'done']);
      const call = events.find((e) => e.event === 'tool-call')!.data;
      expect(call).to.deep.include({ name: 'probe__echo', input: { message: 'hi from chat' } });
      const result = events.find((e) => e.event === 'tool-result')!.data;
      expect(result).to.include({ name: 'probe__echo', isError: false });
      expect(result.content).to.include('hi from chat');
      expect(result.paid).to.be.an('object');
      const text = events
        .filter((e) => e.event === 'text-delta')
        .map((e) => e.data.text)
        .join('');
      expect(text).to.include('Tool probe__echo returned:');
      const usages = events
        .filter((e) => e.event === 'usage')
        .map((e) => BigInt(e.data.baseLlmCost as string));
      expect(usages).to.have.length(2);
      const base = usages.reduce((a, b) => a + b, 0n);
      const cost = events.find((e) => e.event === 'cost')!.data;
      const expected = (10n * base + 100n * 500n + 99n) / 100n;
      expect(cost).to.include({
        keyKind: 'byok',
        toolCalls: 1,
        baseLlmCost: base.toString(),
        platformCost: expected.toString(),
        charged: expected.toString(),
      });
      expect(events.at(-1)).to.deep.include({ event: 'done' });
      expect(events.at(-1)!.data).to.include({ finishReason: 'stop', steps: 2, toolCalls: 1 });

      const balance = (await client.json('GET', '/wallet/balance')).body;
      expect(BigInt(balance.available as string)).to.equal(2n * USD - expected);
      const charges = (
        (await client.json('GET', '/wallet/transactions')).body.transactions as Record<string, string>[]
      ).filter((t) => t.kind === 'charge');
      expect(charges).to.have.length(1);
      expect(charges[0]).to.include({ amount: expected.toString(), agentId: agent.id });
      // The operator wallet paid the gateway on chain exactly the tool's price, the one the wallet was charged.
      expect(result.paid).to.include({ amount: '500' });
      expect(operatorFunds - (await tokenBalance(chain, operator.address))).to.equal(500n);
      // A secret all the same: no log line shows the operator's key.
      expect(logs.text()).to.not.include(operator.privateKey.slice(2));

      if (gatewayPath === 'operator') return;
      // Restart the runtime (and the gateway with it): the key is still stored, locked until an unlock.
      await serving!.stop();
      serving = undefined;
      const again = await up();
      const status = (await runtimeClient(again.runtime, jwt).json('GET', '/wallet/provider-vault')).body;
      expect(status.unlocked).to.equal(false);
      const slot = (status.slots as { slot: string; configured: boolean; unlocked: boolean }[]).find(
        (s) => s.slot === 'PROVIDER_API_KEY',
      );
      expect(slot).to.include({ configured: true, unlocked: false });
    });
  });
