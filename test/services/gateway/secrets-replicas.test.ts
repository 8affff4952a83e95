import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { openDatabase } from '../../../core/db/database.ts';
import { PROOF_META_KEY, type ExecutionProof } from '../../../services/gateway/proofs.ts';
import { SECRETS_VERSION_TTL_MS } from '../../../services/gateway/secrets/vault.ts';
import type { Serving } from '../../../services/serve.ts';
import { eventually } from '../../support/eventually.ts';
import { describeEachDatabase, stickyDatabase, type TestDatabase } from '../../support/kernel.ts';
import { captureLogs } from '../../support/logs.ts';
import { mcpClient, ProbeWorld, textOf, walletToken } from './support.ts';

const proofOf = (result: unknown) => (result as CallToolResult)._meta?.[PROOF_META_KEY] as ExecutionProof;

/**
 * Two gateways on one database, as two replicas behind a load balancer: what a wallet stores or
 * deletes through one is what the other's server processes run with, within the bounded staleness.
 */
describeEachDatabase('gateway secrets across replicas', (fresh: TestDatabase) => {
  const sticky = stickyDatabase(fresh);
  const token = Math.random().toString(36).slice(2);
  const first = `canary-${token}-first-secret-value`;
  const second = `canary-${token}-second-secret-value`;
  let world: ProbeWorld;
  let a: Serving & { url: string };
  let b: Serving & { url: string };
  let logs: ReturnType<typeof captureLogs>;
  let alice: Awaited<ReturnType<typeof walletToken>>;
  let onB: Client;
  const seen: string[] = [];
  /** A tool call on B; its answer is kept to prove no secret reaches one (unless it echoes its own input). */
  const call = async (name: string, args: Record<string, unknown>, echoesInput = false) => {
    const result = await onB.callTool({ name, arguments: args });
    if (!echoesInput) seen.push(JSON.stringify(result));
    return result;
  };
  const secrets = async (gateway: { url: string }, method: 'POST' | 'DELETE', body?: unknown) => {
    const res = await fetch(`${gateway.url}/api/secrets/probe-locked`, {
      method,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${alice.token}` },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    seen.push(await res.clone().text());
    expect(res.status).to.equal(200);
  };

  before(async function () {
    this.timeout(120_000);
    world = await ProbeWorld.start();
    logs = captureLogs();
    // PostgreSQL: replicas share it (database.shared), so secrets live in it. SQLite: asked for.
    const settings = fresh.name === 'sqlite' ? { secretsStore: 'database' as const } : {};
    a = await world.gateway(sticky.database, settings, { logDestination: logs.stream });
    b = await world.gateway(sticky.database, settings, { logDestination: logs.stream });
    alice = await walletToken(a.url);
    onB = await mcpClient(`${b.url}/mcp/server/probe-locked`, alice.token);
  });
  after(async () => {
    await onB?.close();
    await a?.stop();
    await b?.stop();
    await world?.stop();
    await sticky.drop();
  });

  it('runs a process on B with the secret stored through A, at once', async () => {
    const before = await call('echo', { message: 'x' });
    expect(textOf(before)).to.match(/needs the secret PROBE_TOKEN/);
    await secrets(a, 'POST', { secrets: { PROBE_TOKEN: first } });
    const echoed = await call('env', { name: 'PROBE_TOKEN' });
    expect(textOf(echoed)).to.equal('[REDACTED]'); // the process has the value; the caller never sees it
    expect(proofOf(echoed).secretNames).to.deep.equal(['PROBE_TOKEN']);
  });

  it('restarts B’s warm process with the secret replaced through A, within the bounded staleness', async () => {
    const warm = textOf(await call('instance', {}));
    expect(textOf(await call('instance', {}))).to.equal(warm);
    await secrets(a, 'POST', { secrets: { PROBE_TOKEN: second } });
    // A process's results are redacted with the secrets it was started with: the new value comes back
    // redacted only from a process that holds it.
    await eventually(
      'B’s process holding the replaced secret',
      async () => textOf(await call('echo', { message: second }, true)) === '[REDACTED]',
      SECRETS_VERSION_TTL_MS + 15_000,
    );
    expect(textOf(await call('instance', {}))).to.not.equal(warm);
  });

  it('answers "needs the secret" on B once it was deleted through A, within the bounded staleness', async () => {
    expect(textOf(await call('env', { name: 'PROBE_TOKEN' }))).to.equal('[REDACTED]');
    await secrets(a, 'DELETE');
    const refusal = await eventually(
      'B refusing for the deleted secret',
      async () => {
        const result = await call('env', { name: 'PROBE_TOKEN' });
        return result.isError === true && result;
      },
      SECRETS_VERSION_TTL_MS + 15_000,
    );
    expect(textOf(refusal)).to.match(/needs the secret PROBE_TOKEN/);
    expect(proofOf(refusal).secretNames).to.deep.equal([]);
  });

  it('keeps no secret in clear: not in the database, a log line or an answer', async () => {
    const { url, schema } = sticky.database.fresh();
    const db = await openDatabase({ url, ...(schema !== undefined && { schema }) });
    const rows = JSON.stringify(await db('gateway_secrets').select()).toLowerCase();
    await db.destroy();
    expect(rows).to.include('"sealed":null'); // the deleted entry's row, kept for its version
    expect(rows).not.to.include(alice.address.toLowerCase().slice(2));
    const text = logs.text();
    expect(text.length).to.be.greaterThan(0);
    for (const canary of [first, second]) {
      expect(rows).not.to.include(canary);
      expect(text).not.to.include(canary);
      expect(seen.join('\n')).not.to.include(canary);
    }
  });
});
