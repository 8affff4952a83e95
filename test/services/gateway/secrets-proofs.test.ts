import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { openDatabase } from '../../../core/db/database.ts';
import { PROOF_META_KEY, type ExecutionProof } from '../../../services/gateway/proofs.ts';
import type { Serving } from '../../../services/serve.ts';
import { describeEachDatabase, stickyDatabase, type TestDatabase } from '../../support/kernel.ts';
import { captureLogs } from '../../support/logs.ts';
import { mcpClient, ProbeWorld, textOf, walletToken } from './support.ts';

const proofOf = (result: unknown) => (result as CallToolResult)._meta?.[PROOF_META_KEY] as ExecutionProof;

describeEachDatabase('gateway proofs and secrets', (fresh: TestDatabase) => {
  // One database for both gateway processes of the restart test.
  const sticky = stickyDatabase(fresh);
  const database = sticky.database;
  const canary = `canary-${Math.random().toString(36).slice(2)}-probe-token-value`;
  let world: ProbeWorld;
  let gateway: Serving & { url: string };
  let logs: ReturnType<typeof captureLogs>;
  let vaultDir: string;
  const seen: string[] = [];
  const json = async (res: Response) => {
    const text = await res.text();
    seen.push(text);
    return JSON.parse(text) as Record<string, unknown>;
  };
  const post = (path: string, body: unknown, token?: string) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
    });

  before(async function () {
    this.timeout(120_000);
    world = await ProbeWorld.start();
    vaultDir = mkdtempSync(join(world.dir, 'vault-'));
    chmodSync(vaultDir, 0o700);
    logs = captureLogs();
    gateway = await world.gateway(
      database,
      { secretKey: 'canary-gateway-master-key-0123456789abcdef', toolCallTimeoutSeconds: 10 },
      { logDestination: logs.stream, vault: { persistenceDir: vaultDir } },
    );
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
    await sticky.drop();
  });

  it('puts a proof on every tool result that POST /api/verify accepts, and refuses any changed byte naming the field', async () => {
    const client = await mcpClient(`${gateway.url}/mcp/server/probe`);
    const result = await client.callTool({ name: 'echo', arguments: { message: 'proved' } });
    await client.close();
    const proof = proofOf(result);
    expect(proof.server).to.include({ id: 'probe', package: '@sigil-test/probe-server', version: '1.0.0' });
    expect(proof.tee).to.deep.equal({ enabled: false, platform: 'none' });
    const request = { serverId: 'probe', tool: 'echo', arguments: { message: 'proved' } };
    const ok = await post('/api/verify', { proof, request, response: result });
    expect(ok.status).to.equal(200);
    expect((await json(ok)).valid).to.equal(true);
    for (const [field, change] of [
      ['tool', { ...proof, tool: 'echo2' }],
      [
        'timestamp',
        { ...proof, timestamp: proof.timestamp.replace(/\d(?=Z$)/, (d) => String((Number(d) + 1) % 10)) },
      ],
      ['server', { ...proof, server: { ...proof.server, digest: `${proof.server.digest}A` } }],
      ['signature', { ...proof, signature: proof.signature.replace(/^./, (c) => (c === '0' ? '1' : '0')) }],
    ] as const) {
      const res = await post('/api/verify', { proof: change });
      expect(res.status, field).to.equal(422);
      expect(((await json(res)).details as { fields: string[] }).fields).to.deep.equal([field]);
    }
    const wrongResponse = await post('/api/verify', {
      proof,
      response: { content: [{ type: 'text', text: 'forged' }] },
    });
    expect(((await json(wrongResponse)).details as { fields: string[] }).fields).to.deep.equal([
      'responseHash',
    ]);
    expect((await post('/api/verify', { proof: { ...proof, extra: 1 } })).status).to.equal(400);
  });

  it('gives a server its wallet’s secret as an environment variable, never another wallet’s, never the value back', async () => {
    const alice = await walletToken(gateway.url);
    const bob = await walletToken(gateway.url);
    const stored = await post('/api/secrets/probe', { secrets: { PROBE_TOKEN: canary } }, alice.token);
    expect(stored.status).to.equal(200);
    expect(await json(stored)).to.deep.include({ names: ['PROBE_TOKEN'], persistence: 'persistent' });
    const listed = await json(
      await fetch(`${gateway.url}/api/secrets/probe`, {
        headers: { authorization: `Bearer ${alice.token}` },
      }),
    );
    expect(listed.names).to.deep.equal(['PROBE_TOKEN']);

    const asAlice = await mcpClient(`${gateway.url}/mcp/server/probe`, alice.token);
    const echoed = await asAlice.callTool({ name: 'env', arguments: { name: 'PROBE_TOKEN' } });
    expect(textOf(echoed)).to.equal('[REDACTED]'); // the server saw the value; the client never does
    expect(proofOf(echoed).secretNames).to.deep.equal(['PROBE_TOKEN']);
    const failed = await asAlice.callTool({ name: 'fail', arguments: { quoteEnv: 'PROBE_TOKEN' } });
    expect(failed.isError).to.equal(true);
    expect(textOf(failed)).to.match(/PROBE_TOKEN=\[REDACTED\]/);
    seen.push(JSON.stringify(echoed), JSON.stringify(failed));
    await asAlice.close();

    const asBob = await mcpClient(`${gateway.url}/mcp/server/probe`, bob.token);
    const bobs = await asBob.callTool({ name: 'env', arguments: { name: 'PROBE_TOKEN' } });
    expect(textOf(bobs)).to.equal('(unset)');
    expect(proofOf(bobs).secretNames).to.deep.equal([]);
    await asBob.close();
  });

  it('refuses an undeclared secret name, and anonymous callers', async () => {
    const alice = await walletToken(gateway.url);
    const undeclared = await post(
      '/api/secrets/probe',
      { secrets: { NODE_OPTIONS: '--require /tmp/x.js' } },
      alice.token,
    );
    expect(undeclared.status).to.equal(400);
    expect((await json(undeclared)).message).to.match(/declares no secret named NODE_OPTIONS/);
    expect((await post('/api/secrets/probe', { secrets: { PROBE_TOKEN: 'x' } })).status).to.equal(401);
  });

  it('names a missing required secret and how to set it', async () => {
    const client = await mcpClient(
      `${gateway.url}/mcp/server/probe-locked`,
      (await walletToken(gateway.url)).token,
    );
    const result = await client.callTool({ name: 'echo', arguments: { message: 'x' } });
    await client.close();
    expect(result.isError).to.equal(true);
    expect(textOf(result)).to.match(/needs the secret PROBE_TOKEN.*POST \/api\/secrets\/probe-locked/);
  });

  it('proves a refusal (a missing secret) as it proves a result, over /mcp and /mcp/server: POST /api/verify accepts it', async () => {
    const { token } = await walletToken(gateway.url);
    const perServer = await mcpClient(`${gateway.url}/mcp/server/probe-locked`, token);
    const namespaced = await mcpClient(`${gateway.url}/mcp`, token, 'refusals');
    try {
      const enabled = await namespaced.callTool({
        name: 'gateway_enable_server',
        arguments: { serverId: 'probe-locked' },
      });
      expect(enabled.isError, textOf(enabled)).to.not.equal(true);
      const refusals = [
        await perServer.callTool({ name: 'echo', arguments: { message: 'locked' } }),
        await namespaced.callTool({ name: 'probe-locked__echo', arguments: { message: 'locked' } }),
      ];
      for (const refusal of refusals) {
        expect(refusal.isError).to.equal(true);
        expect(textOf(refusal)).to.match(/needs the secret PROBE_TOKEN/);
        const proof = proofOf(refusal);
        expect(proof, 'the refusal carries a proof').to.be.an('object');
        expect(proof).to.deep.include({ tool: 'echo', secretNames: [] });
        expect(proof.server).to.include({ id: 'probe-locked', package: '@sigil-test/probe-server' });
        const { _meta: _ignored, ...response } = refusal as CallToolResult;
        const verified = await post('/api/verify', {
          proof,
          request: { serverId: 'probe-locked', tool: 'echo', arguments: { message: 'locked' } },
          response,
        });
        expect(verified.status, JSON.stringify(await json(verified.clone()))).to.equal(200);
      }
    } finally {
      await perServer.close();
      await namespaced.close();
    }
  });

  it('keeps secrets as ciphertext only (files on one machine, the database where replicas share it), and the canary appears in no log line or response', async () => {
    const dir = join(vaultDir, 'gateway-secrets');
    const files = existsSync(dir)
      ? readdirSync(dir).map((file) => readFileSync(join(dir, file), 'utf8'))
      : [];
    const { url, schema } = database.fresh();
    const db = await openDatabase({ url, ...(schema !== undefined && { schema }) });
    const rows = ((await db('gateway_secrets').select()) as unknown[]).map((row) => JSON.stringify(row));
    await db.destroy();
    // SQLite is one machine by default; PostgreSQL is shared by default (database.shared).
    const [kept, none] = database.name === 'postgres' ? [rows, files] : [files, rows];
    expect(kept.length).to.be.greaterThan(0);
    expect(none).to.deep.equal([]);
    for (const content of kept) {
      expect(content).not.to.include(canary);
      expect(content).not.to.match(/0x[0-9a-fA-F]{40}/); // no wallet address either
    }
    expect(logs.text().length).to.be.greaterThan(0);
    expect(logs.text()).not.to.include(canary);
    expect(seen.join('\n')).not.to.include(canary);
  });

  it('restores a wallet’s secrets after a restart with the same key and directory', async () => {
    const alice = await walletToken(gateway.url);
    await post('/api/secrets/probe', { secrets: { PROBE_TOKEN: canary } }, alice.token);
    await gateway.stop();
    gateway = await world.gateway(
      database,
      { secretKey: 'canary-gateway-master-key-0123456789abcdef' },
      { logDestination: logs.stream, vault: { persistenceDir: vaultDir } },
    );
    // The wallet token was issued by the previous process; tokens live in the database, which survived.
    const listed = await fetch(`${gateway.url}/api/secrets/probe`, {
      headers: { authorization: `Bearer ${alice.token}` },
    });
    expect(listed.status).to.equal(200);
    expect((await json(listed)).names).to.deep.equal(['PROBE_TOKEN']);
    const client = await mcpClient(`${gateway.url}/mcp/server/probe`, alice.token);
    const echoed = await client.callTool({ name: 'env', arguments: { name: 'PROBE_TOKEN' } });
    await client.close();
    expect(textOf(echoed)).to.equal('[REDACTED]');
  });
});
