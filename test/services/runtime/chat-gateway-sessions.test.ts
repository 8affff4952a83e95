import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { privateKeyToAccount } from 'viem/accounts';
import { GATEWAY_MCP_REVISION, operatorFetch } from '../../../services/runtime/gateway-client.ts';
import type { Serving } from '../../../services/serve.ts';
import { systemClock } from '../../../core/clock.ts';
import { PROOF_META_KEY } from '../../../services/gateway/proofs.ts';
import { eventually, recordsOf, settlementRows } from '../gateway/payments/support.ts';
import { ProbeWorld, walletToken } from '../gateway/support.ts';
import { startDevChain, type DevChain } from '../../support/chain.ts';
import { freePort } from '../../support/cli.ts';
import { describeEachDatabase, stickyDatabase } from '../../support/kernel.ts';
import { readSse } from './chat-support.ts';
import { chatUser, serveChatWorld } from './chat-world.ts';

const USD = 1_000_000n;

interface Seen {
  method: string;
  session: string;
  onBehalfOf: string;
  /** The MCP-Protocol-Version header ('' when absent). */
  versionHeader: string;
  /** The message's `params` (its `_meta` envelope among them). */
  params: Record<string, unknown>;
  /** The gateway's JSON-RPC answer (from JSON or the SSE stream), once it came. */
  answer?: { result?: Record<string, unknown>; error?: { code: number } };
}

/** The JSON-RPC response among the messages of an answer (a JSON body, or an SSE stream's events). */
function responseOf(body: string): Seen['answer'] {
  const messages = body.trimStart().startsWith('{')
    ? [body]
    : body
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5));
  for (const message of messages) {
    try {
      const parsed = JSON.parse(message) as Seen['answer'] & { id?: unknown };
      if (parsed.id !== undefined) return parsed;
    } catch {
      // Not JSON: not a response.
    }
  }
  return undefined;
}

/**
 * A real HTTP hop between the runtime and the gateway that notes each JSON-RPC request, its scope,
 * revision and answer.
 */
async function recordingProxy(target: () => string): Promise<{ url: string; seen: Seen[]; server: Server }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      let entry: Seen | undefined;
      try {
        const message = JSON.parse(body.toString()) as { method: string; params?: Record<string, unknown> };
        entry = {
          method: message.method,
          session: String(req.headers['x-mcp-session'] ?? ''),
          onBehalfOf: String(req.headers['x-sigil-on-behalf-of'] ?? ''),
          versionHeader: String(req.headers['mcp-protocol-version'] ?? ''),
          params: message.params ?? {},
        };
        seen.push(entry);
      } catch {
        // Not JSON-RPC: forwarded as it is.
      }
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers))
        if (value !== undefined && !['host', 'connection', 'content-length'].includes(name))
          headers.set(name, Array.isArray(value) ? value.join(', ') : value);
      fetch(`${target()}${req.url}`, {
        method: req.method as string,
        headers,
        ...(body.length ? { body } : {}),
      }).then(
        async (answer) => {
          const answered = Buffer.from(await answer.arrayBuffer());
          if (entry !== undefined && answered.length > 0) entry.answer = responseOf(answered.toString());
          res.writeHead(answer.status, Object.fromEntries(answer.headers));
          res.end(answered);
        },
        () => {
          res.writeHead(502).end();
        },
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server };
}

/** The JSON a tool-result event of the stream carries (meta-tools answer JSON). */
async function chat(user: Awaited<ReturnType<typeof chatUser>>, session: string, content: string) {
  const res = await user.client.send('POST', `/agents/${user.agentId}/sessions/${session}/messages`, {
    content,
  });
  const events = await readSse(res);
  expect(events.filter((e) => e.event === 'error')).to.deep.equal([]);
  return events.filter((e) => e.event === 'tool-result').map((e) => e.data);
}

const enabledIn = async (user: Awaited<ReturnType<typeof chatUser>>, session: string): Promise<string[]> => {
  const [result] = await chat(user, session, 'use tool gateway_list_enabled');
  return (JSON.parse(result!.content as string) as { enabled: string[] }).enabled;
};

/**
 * Issue 22, point 5: each chat session has its own enabled set and secrets at the gateway, scoped to
 * its wallet, on both paths (on the operator path the operator's signed request names the wallet),
 * and one MCP client per chat session serves all its messages.
 */
for (const gatewayPath of ['delegated', 'operator'] as const)
  describeEachDatabase(`runtime chat: gateway sessions of chats (${gatewayPath} path)`, (database) => {
    const sticky = stickyDatabase(database);
    let chain: DevChain;
    let world: ProbeWorld;
    let dir: string;
    let serving: Serving & { urls: Record<string, string> };
    let proxy: Awaited<ReturnType<typeof recordingProxy>>;

    before(async function () {
      this.timeout(180_000);
      [chain, world] = await Promise.all([startDevChain(), ProbeWorld.start()]);
      dir = mkdtempSync(join(tmpdir(), 'sigil-chat-sessions-'));
      const ports = { runtime: await freePort(), gateway: await freePort() };
      proxy = await recordingProxy(() => `http://127.0.0.1:${ports.gateway}`);
      serving = await serveChatWorld({
        database: sticky.database,
        chain,
        world,
        vaultDir: join(dir, 'vault'),
        ports,
        gatewayPath,
        // server/discover may be reused for an hour: the runtime asks it once in this block.
        gateway: { mcp: { listTtlSeconds: 3600 } },
        upConfig: (config) => ({
          ...config,
          runtime: { ...config.runtime, chat: { ...config.runtime.chat, gatewayUrl: proxy.url } },
        }),
      });
    });
    after(async () => {
      await serving?.stop();
      proxy?.server.close();
      await world?.stop();
      await chain?.stop();
      rmSync(dir, { recursive: true, force: true });
      await sticky.drop();
    });

    it('a per-wallet secret resolves to the wallet the chat is for, never to the operator’s', async function () {
      this.timeout(240_000);
      const alice = await chatUser(serving.urls.runtime as string, chain, 2n * USD);
      const bob = await chatUser(serving.urls.runtime as string, chain, 2n * USD);
      const gateway = serving.urls.gateway as string;
      const { jwt } = await walletToken(gateway, alice.wallet);
      const stored = await fetch(`${gateway}/api/secrets/probe`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${jwt}` },
        body: JSON.stringify({ secrets: { PROBE_TOKEN: 'alice-token-4c1e' } }),
      });
      expect(stored.status).to.equal(200);
      // The operator wallet (the runtime's) has a secret of its own for the same server.
      const asOperator = operatorFetch({
        signer: privateKeyToAccount(chain.accounts.runtime.privateKey),
        chainId: 8453,
        clock: systemClock,
        signFor: gateway,
      });
      const own = await asOperator(`${gateway}/api/secrets/probe`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ secrets: { PROBE_TOKEN: 'operator-token-9b2f' } }),
      });
      expect(own.status).to.equal(200);

      const read = async (user: typeof alice) => {
        const session = (
          await user.client.json('POST', `/agents/${user.agentId}/sessions`, { servers: ['probe'] })
        ).body.id as string;
        const [result] = await chat(user, session, 'use tool probe__env with {"name":"PROBE_TOKEN"}');
        return result!;
      };
      const alices = await read(alice);
      const bobs = await read(bob);
      // Alice's own secret was injected (and redacted from the result); Bob has none, not the operator's.
      expect(alices).to.include({ isError: false, content: '[REDACTED]' });
      expect(bobs).to.include({ isError: false, content: '(unset)' });
    });
    it('two wallets and two sessions of one wallet each have their own enabled set, never another’s', async function () {
      this.timeout(240_000);
      const alice = await chatUser(serving.urls.runtime as string, chain, 2n * USD);
      const bob = await chatUser(serving.urls.runtime as string, chain, 2n * USD);
      const open = async (user: typeof alice) =>
        (await user.client.json('POST', `/agents/${user.agentId}/sessions`, { servers: ['probe'] })).body
          .id as string;
      const [aliceFirst, aliceSecond, bobs] = [await open(alice), await open(alice), await open(bob)];

      const [enabled] = await chat(
        alice,
        aliceFirst,
        'use tool gateway_enable_server with {"serverId":"probe-locked"}',
      );
      expect(enabled).to.include({ isError: false });
      expect(await enabledIn(alice, aliceFirst)).to.deep.equal(['probe', 'probe-locked']);
      expect(await enabledIn(alice, aliceSecond)).to.deep.equal(['probe']);
      expect(await enabledIn(bob, bobs)).to.deep.equal(['probe']);
    });
    it('speaks MCP 2026-07-28 to the gateway: the revision in every request, no initialize, one server/discover; a paid tool settles once, with a proof', async function () {
      this.timeout(240_000);
      const alice = await chatUser(serving.urls.runtime as string, chain, 2n * USD);
      const fresh = sticky.database.fresh();
      const records = await recordsOf(fresh.url, fresh.schema);
      try {
        const before = await settlementRows(records);
        const session = (
          await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, { servers: ['probe'] })
        ).body.id as string;
        const from = proxy.seen.length;
        const [result] = await chat(alice, session, 'use tool probe__echo with {"message":"paid at 2026"}');
        expect(result).to.include({ isError: false, billed: true, content: 'paid at 2026' });
        const paid = result!.paid as { transaction: string };
        expect(paid.transaction).to.match(/^0x[0-9a-f]{64}$/);

        // Every request since this block's first chat: the revision in _meta and in the header.
        const methods = proxy.seen.map((s) => s.method);
        expect(methods).to.not.include('initialize');
        expect(methods).to.not.include('notifications/initialized');
        expect(methods.filter((m) => m === 'server/discover')).to.have.length(1);
        for (const request of proxy.seen) {
          const meta = request.params._meta as Record<string, unknown>;
          expect(meta['io.modelcontextprotocol/protocolVersion'], request.method).to.equal(
            GATEWAY_MCP_REVISION,
          );
          expect(meta['io.modelcontextprotocol/clientCapabilities'], request.method).to.deep.equal({});
          expect(request.versionHeader, request.method).to.equal(GATEWAY_MCP_REVISION);
        }

        // The call: refused with 402, then paid beside the envelope, answered with the receipt and a proof.
        const calls = proxy.seen.slice(from).filter((s) => s.params.name === 'probe__echo');
        expect(calls.map((call) => call.answer?.error?.code ?? 'result')).to.deep.equal([402, 'result']);
        const [unpaid, paying] = calls as [Seen, Seen];
        expect(unpaid.params._meta).to.not.have.property('x402/payment');
        expect(paying.params._meta).to.have.property('x402/payment');
        const answered = paying.answer!.result!;
        expect(answered.resultType).to.equal('complete');
        const meta = answered._meta as Record<string, unknown>;
        expect(meta[PROOF_META_KEY]).to.include.keys('requestHash', 'responseHash');
        expect(meta['x402/payment-response']).to.include({ success: true, transaction: paid.transaction });
        // Settled once: one new record, with that transaction.
        const known = new Set(before.map((row) => row.id));
        // The answer leaves while its settled mark is written: a moment later the mark is in.
        const added = await eventually('the settlement of the call', async () => {
          const rows = (await settlementRows(records)).filter((row) => !known.has(row.id));
          return rows.every((row) => row.state !== 'settling') && rows;
        });
        expect(added.map((row) => [row.state, row.transaction])).to.deep.equal([
          ['settled', paid.transaction],
        ]);
      } finally {
        await records.destroy();
      }
    });
    it('one MCP client serves every message of a chat session: it connects, enables and lists once', async function () {
      this.timeout(240_000);
      const alice = await chatUser(serving.urls.runtime as string, chain, 2n * USD);
      const open = async () =>
        (await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, { servers: ['probe'] })).body
          .id as string;
      const [first, second] = [await open(), await open()];
      const from = proxy.seen.length;
      for (let message = 0; message < 3; message += 1) {
        expect(await enabledIn(alice, first)).to.deep.equal(['probe']);
        expect(await enabledIn(alice, second)).to.deep.equal(['probe']);
      }
      const seen = proxy.seen.slice(from);
      const scopes = [...new Set(seen.map((s) => s.session))];
      expect(scopes, 'one gateway session per chat session').to.have.length(2);
      for (const scope of scopes) {
        const of = seen.filter((s) => s.session === scope);
        const count = (method: string) => of.filter((s) => s.method === method).length;
        // MCP 2026-07-28: no handshake, and the gateway's server/discover answer is reused.
        expect(count('initialize'), `initialize in ${scope}`).to.equal(0);
        expect(count('tools/list'), `tools/list in ${scope}`).to.equal(1);
        // One gateway_enable_server, then one gateway_list_enabled per message.
        expect(count('tools/call'), `tools/call in ${scope}`).to.equal(4);
        // On the operator path each request names the wallet it acts for.
        if (gatewayPath === 'operator')
          expect([...new Set(of.map((s) => s.onBehalfOf.toLowerCase()))]).to.deep.equal([
            alice.wallet.address.toLowerCase(),
          ]);
      }
    });
  });
