import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { privateKeyToAccount } from 'viem/accounts';
import { operatorFetch } from '../../../services/runtime/gateway-client.ts';
import type { Serving } from '../../../services/serve.ts';
import { systemClock } from '../../../core/clock.ts';
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
}

/** A real HTTP hop between the runtime and the gateway that notes each JSON-RPC method and its scope. */
async function recordingProxy(target: () => string): Promise<{ url: string; seen: Seen[]; server: Server }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      try {
        seen.push({
          method: (JSON.parse(body.toString()) as { method: string }).method,
          session: String(req.headers['x-mcp-session'] ?? ''),
          onBehalfOf: String(req.headers['x-sigil-on-behalf-of'] ?? ''),
        });
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
          res.writeHead(answer.status, Object.fromEntries(answer.headers));
          res.end(Buffer.from(await answer.arrayBuffer()));
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
        expect(count('initialize'), `initialize in ${scope}`).to.equal(1);
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
