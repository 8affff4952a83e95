import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { createRuntimeApp } from '../../../services/runtime/app.ts';
import { HistoryKeys } from '../../../services/runtime/chat/history-keys.ts';
import { rewrapHistory } from '../../../services/runtime/chat/history-rewrap.ts';
import { ReflectMemory } from '../../../services/runtime/reflect/memory.ts';
import { runSigil } from '../../support/cli.ts';
import { captureLogs } from '../../support/logs.ts';
import { describeEachDatabase, openTestKernel } from '../../support/kernel.ts';
import { runtimeClient } from './chat-support.ts';
import { newDataKey, newUser, say, session, start, type Client } from './chat-history-support.ts';
import type { Stack } from './support.ts';

const canary = () => `canary-${randomBytes(6).toString('hex')}`;

/** Every stored byte of the history (both tables, every column), as one text to search. */
async function storedHistory(stack: Stack): Promise<string> {
  const db = stack.kernel.db;
  return JSON.stringify([await db('chat_sessions').select(), await db('chat_messages').select()]);
}

/** Restarts the runtime app on the same kernel with other history keys (what a redeploy does). */
async function restartWith(stack: Stack, dataKeys: { id: string; key: string }[]): Promise<void> {
  stack.kernel.config.runtime.history.dataKeys = dataKeys;
  stack.replaceRuntime(await createRuntimeApp(stack.kernel, { gatewayUrl: stack.url('gateway') }));
}

const read = (client: Client, agentId: string, id: string) =>
  client.json('GET', `/agents/${agentId}/sessions/${id}/messages`);

describe('runtime chat: history encrypted at rest', function () {
  this.timeout(180_000);

  describeEachDatabase('chat history encryption', (database) => {
    it('with a key, no stored byte holds the content; the owner reads it back; the key is in no log', async () => {
      const k1 = newDataKey('k1');
      const logs = captureLogs();
      const runtime = await start(database, { dataKeys: [k1], logs: logs.stream });
      try {
        const [secret, instructions] = [canary(), canary()];
        const alice = await newUser(runtime.stack);
        const id = await session(alice.client, alice.agentId, { system: `obey ${instructions}` });
        await say(alice.client, alice.agentId, id, `my secret is ${secret}`);
        const stored = await storedHistory(runtime.stack);
        expect(stored).to.include(id);
        expect(stored).to.not.include(secret);
        expect(stored).to.not.include(instructions);
        expect(stored).to.not.include(k1.key);
        const row = await runtime.stack.kernel.db('chat_sessions').where({ id }).first();
        expect(row).to.include({ key_id: 'k1' });

        const view = await alice.client.json('GET', `/agents/${alice.agentId}/sessions/${id}`);
        expect(view.body).to.include({ encrypted: true, system: `obey ${instructions}` });
        const messages = (await read(alice.client, alice.agentId, id)).body.messages as { content: string }[];
        expect(messages.map((m) => m.content)).to.deep.equal([
          `my secret is ${secret}`,
          `my secret is ${secret}`,
        ]);
        expect(logs.text()).to.not.include(k1.key);
      } finally {
        await runtime.close();
      }
    });

    it('refuses with a clear error, never plain text, under a wrong or missing key, and a tampered row', async () => {
      const k1 = newDataKey('k1');
      const runtime = await start(database, { dataKeys: [k1] });
      const { stack } = runtime;
      try {
        const bob = await newUser(stack);
        const secret = canary();
        const id = await session(bob.client, bob.agentId);
        await say(bob.client, bob.agentId, id, `first ${secret}`, 'one');
        await say(bob.client, bob.agentId, id, `second ${secret}`, 'two');

        await restartWith(stack, [{ id: 'k1', key: randomBytes(32).toString('base64') }]);
        const wrong = await read(bob.client, bob.agentId, id);
        expect(wrong.status).to.equal(503);
        expect(wrong.body.details).to.deep.equal({ reason: 'history_key_mismatch', keyId: 'k1' });
        expect(JSON.stringify(wrong.body)).to.not.include(secret);
        const chat = await bob.client.json('POST', `/agents/${bob.agentId}/sessions/${id}/messages`, {
          content: 'go on',
        });
        expect(chat.status).to.equal(503);
        expect(chat.body.details).to.include({ reason: 'history_key_mismatch' });

        await restartWith(stack, []);
        const missing = await read(bob.client, bob.agentId, id);
        expect(missing.status).to.equal(503);
        expect(missing.body.details).to.deep.equal({ reason: 'history_key_missing', keyId: 'k1' });
        expect(missing.body.hint).to.include('runtime.history.dataKeys');

        await restartWith(stack, [k1]);
        expect((await read(bob.client, bob.agentId, id)).status).to.equal(200);
        // Two user messages' boxes swapped: each is bound to its seq, so neither opens in the other's row.
        const db = stack.kernel.db;
        const rows = (await db('chat_messages').where({ session_id: id, role: 'user' }).orderBy('seq')) as {
          seq: number;
          content: string;
        }[];
        const [one, three] = rows as [(typeof rows)[0], (typeof rows)[0]];
        const put = (seq: number, content: string) =>
          db('chat_messages').where({ session_id: id, seq }).update({ content });
        await put(Number(one.seq), three.content);
        await put(Number(three.seq), one.content);
        const swapped = await read(bob.client, bob.agentId, id);
        expect(swapped.status).to.equal(500);
        expect(swapped.body.details).to.include({ reason: 'history_tampered', sessionId: id });
        expect(JSON.stringify(swapped.body)).to.not.include(secret);
        // One bit of a ciphertext flipped.
        await put(Number(one.seq), one.content);
        const box = JSON.parse(three.content) as { ciphertext: string };
        const bytes = Buffer.from(box.ciphertext, 'base64');
        bytes[0] = (bytes[0] as number) ^ 1;
        await put(Number(three.seq), JSON.stringify({ ...box, ciphertext: bytes.toString('base64') }));
        expect((await read(bob.client, bob.agentId, id)).body.details).to.include({
          reason: 'history_tampered',
        });
        await put(Number(three.seq), three.content);
        expect((await read(bob.client, bob.agentId, id)).status).to.equal(200);
      } finally {
        await runtime.close();
      }
    });

    it('rotates: a new key first, older sessions still open under the old one, rewrap moves them, then the old key can go', async () => {
      const [k1, k2] = [newDataKey('k1'), newDataKey('k2')];
      const runtime = await start(database);
      const { stack } = runtime;
      try {
        const carol = await newUser(stack);
        const plainSecret = canary();
        const plain = await session(carol.client, carol.agentId);
        await say(carol.client, carol.agentId, plain, `before any key ${plainSecret}`);
        await restartWith(stack, [k1]);
        const underK1 = await session(carol.client, carol.agentId);
        await say(carol.client, carol.agentId, underK1, 'under the first key');
        await restartWith(stack, [k2, k1]);
        const underK2 = await session(carol.client, carol.agentId);
        await say(carol.client, carol.agentId, underK2, 'under the second key');
        for (const id of [plain, underK1, underK2])
          expect((await read(carol.client, carol.agentId, id)).status, id).to.equal(200);
        const keyIds = async () =>
          Object.fromEntries(
            (
              (await stack.kernel.db('chat_sessions').select('id', 'key_id')) as {
                id: string;
                key_id: string;
              }[]
            ).map((row) => [row.id, row.key_id]),
          );
        expect(await keyIds()).to.deep.equal({ [plain]: null, [underK1]: 'k1', [underK2]: 'k2' });

        const keys = new HistoryKeys([k2, k1]);
        expect(await rewrapHistory(stack.kernel.db, keys)).to.deep.equal({
          rewrapped: 1,
          encrypted: 1,
          unchanged: 1,
        });
        expect(await rewrapHistory(stack.kernel.db, keys)).to.deep.equal({
          rewrapped: 0,
          encrypted: 0,
          unchanged: 3,
        });
        expect(await keyIds()).to.deep.equal({ [plain]: 'k2', [underK1]: 'k2', [underK2]: 'k2' });
        expect(await storedHistory(stack)).to.not.include(plainSecret);

        // The old key gone: everything still opens, and a session continues with its history.
        await restartWith(stack, [k2]);
        const messages = (await read(carol.client, carol.agentId, plain)).body.messages as {
          content: string;
        }[];
        expect(messages.map((m) => m.content)).to.deep.equal([
          `before any key ${plainSecret}`,
          `before any key ${plainSecret}`,
        ]);
        const next = await say(carol.client, carol.agentId, underK1, 'and on');
        expect(next.usage.inputTokens).to.equal(4 + 4 + 2);
      } finally {
        await runtime.close();
      }
    });
  });

  it('sigil db rewrap-history encrypts under RUNTIME_DATA_KEY, says what it did, and needs a key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sigil-rewrap-'));
    const url = join(dir, 'sigil.db');
    const sqlite = {
      name: 'sqlite',
      fresh: () => ({ url, cleanup: async () => undefined }),
    };
    try {
      const secret = canary();
      const runtime = await start(sqlite);
      const dave = await newUser(runtime.stack);
      const id = await session(dave.client, dave.agentId);
      await say(dave.client, dave.agentId, id, `plain ${secret}`);
      // What self-improvement learned from it, stored as plain text too: a facet and a learning.
      const memory = new ReflectMemory(runtime.stack.kernel.db, runtime.stack.kernel.clock);
      const runId = randomUUID();
      const facets = await memory.addFacets(
        dave.wallet.address,
        1,
        runId,
        { id, agentId: dave.agentId, lastSeq: 2 },
        [{ kind: 'preference', statement: `Always say ${secret}`, messageIds: ['m1'] }],
      );
      await memory.apply(dave.wallet.address, runId, await memory.facets(dave.wallet.address, facets), {
        learnings: [{ statement: `Always say ${secret}`, confidence: 0.9, facets, supersedes: [] }],
        skills: [],
      });
      await runtime.close();

      const env = { DATABASE_URL: url, SIGIL_CONFIG: '' };
      const none = await runSigil(['db', 'rewrap-history'], { cwd: dir, env });
      expect(none.code).to.equal(2);
      expect(none.stderr).to.include('RUNTIME_DATA_KEY');
      const malformed = await runSigil(['db', 'rewrap-history'], {
        cwd: dir,
        env: { ...env, RUNTIME_DATA_KEY: 'k1:not-32-bytes' },
      });
      expect(malformed.code).to.equal(2);
      expect(malformed.stderr).to.include('runtime.history.dataKeys');
      expect(malformed.stderr).to.not.include('not-32-bytes');

      const k1 = newDataKey('k1');
      const rewrap = await runSigil(['db', 'rewrap-history'], {
        cwd: dir,
        env: { ...env, RUNTIME_DATA_KEY: `${k1.id}:${k1.key}` },
      });
      expect(rewrap.stderr).to.equal('');
      expect(rewrap.code).to.equal(0);
      expect(rewrap.stdout).to.equal(
        'chat history under key "k1": 0 rewrapped, 1 encrypted, 0 already under it\n' +
          'self-improvement memory under key "k1": 0 wallet keys rewrapped, 0 already under it, 2 plain-text rows encrypted\n',
      );
      const check = await runSigil(['config', 'check'], {
        cwd: dir,
        env: { ...env, RUNTIME_DATA_KEY: `${k1.id}:${k1.key}` },
      });
      expect(JSON.parse(check.stdout).runtime.history.dataKeys).to.equal('[REDACTED]');
      expect(check.stdout + check.stderr).to.not.include(k1.key);

      const after = await start(sqlite, { dataKeys: [k1] });
      try {
        const client = runtimeClient(after.stack.url('runtime'), await after.stack.signIn(dave.wallet));
        expect(await storedHistory(after.stack)).to.not.include(secret);
        const read = await client.json('GET', `/agents/${dave.agentId}/sessions/${id}/messages`);
        expect((read.body.messages as { content: string }[])[0]!.content).to.equal(`plain ${secret}`);
        const db = after.stack.kernel.db;
        const memoryRows = JSON.stringify([
          await db('reflect_facets').select(),
          await db('reflect_learnings').select(),
        ]);
        expect(memoryRows).to.not.include(secret);
        const learnings = (await client.json('GET', '/wallet/learnings')).body.learnings as {
          statement: string;
        }[];
        expect(learnings.map((l) => l.statement)).to.deep.equal([`Always say ${secret}`]);
      } finally {
        await after.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('warns at start-up in production mode while the history and the memory are plain text', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sigil-history-production-'));
    const signingKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({
      format: 'pem',
      type: 'pkcs8',
    }) as string;
    const key = newDataKey('k1');
    try {
      for (const dataKeys of [[], [key]]) {
        const logs = captureLogs();
        const kernel = await openTestKernel({
          logDestination: logs.stream,
          config: {
            mode: 'production',
            runtime: { mcpSigningKey: signingKey, history: { dataKeys } },
            vault: { persistenceDir: dir },
          },
        });
        try {
          const app = await createRuntimeApp(kernel);
          await app.close();
          expect(
            logs.text().includes('chat history and self-improvement memory are stored in plain text'),
            `${dataKeys.length} keys`,
          ).to.equal(dataKeys.length === 0);
          expect(logs.text()).to.not.include(key.key);
        } finally {
          await kernel.close();
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
