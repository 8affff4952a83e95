import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { PluginEntry } from '../../../../core/config/schema.ts';
import { parseSse, readSse } from '../chat-support.ts';
import type { Stack } from '../support.ts';
import {
  describeEachDatabase,
  type Snapshot,
  snapshotDatabase,
  stickyDatabase,
  type TestDatabase,
} from '../../../support/kernel.ts';
import { observe } from '../../../fixtures/canvas/observe.ts';
import { captureLogs } from '../../../support/logs.ts';
import { approvalMessage } from '../../../../services/runtime/canvas/approvals.ts';
import {
  approvalFlow,
  canvasUser,
  type CanvasUser,
  type CanvasWorld,
  eventsUntil,
  execute,
  fundedCanvasUser,
  LLM_NODE,
  modelTurnsServed,
  nodeCharges,
  runIdOf,
  startCanvasWorld,
  waitingForApproval,
  workflow,
} from './support.ts';

const USD = 1_000_000n;

/**
 * Reads to its end a run that the runtime of `stack` took up after another stopped: from its
 * `run.resumed` event on, node `draft` (a model turn the other runtime ran) is neither run nor
 * charged, and the run ends succeeded, its `charged` (event and record) the one charge on the ledger.
 */
async function expectModelTurnChargedOnce(stack: Stack, user: CanvasUser, runId: string): Promise<void> {
  const events = await eventsUntil(await user.client.send('GET', `/canvas/runs/${runId}/events`));
  const after = events.slice(events.findIndex((e) => e.event === 'run.resumed'));
  expect(after[0]?.event).to.equal('run.resumed');
  expect(after.filter((e) => e.data.nodeId === 'draft' || e.event === 'cost')).to.deep.equal([]);
  expect(after.at(-1)?.data.status).to.equal('succeeded');
  expect(modelTurnsServed(stack)).to.equal(0);
  const charges = await nodeCharges(user, runId, 'draft');
  expect(charges).to.have.length(1);
  expect(charges[0] !== undefined && charges[0] > 0n, 'a charge above 0').to.equal(true);
  const record = await user.client.json('GET', `/canvas/runs/${runId}`);
  expect([after.at(-1)?.data.charged, record.body.charged]).to.deep.equal([
    String(charges[0]),
    String(charges[0]),
  ]);
}

/** The canvas's start-up lines among a runtime's log lines: what it took up of the runs it found. */
const startLines = (logs: string) =>
  logs
    .split('\n')
    .filter((line) => line.includes('"component":"canvas"') && line.includes('waiting for approval'))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .map(({ msg, waiting, resumed }) => ({ msg, waiting, resumed }));

describeEachDatabase('canvas runs across restarts, and whose they are', (database) => {
  /**
   * A runtime that stops, and another that takes over its database and data directory, as a restart:
   * `first` runs on the first, `second` on the next, opened on `reopenOn` when `first` gives one (the
   * database as a crash left it) or else on the same database. The next runtime is on the same machine
   * (database.shared false): the crashed one, whose heartbeat the copy holds fresh, was its predecessor.
   */
  async function acrossRestart<T extends { runId: string; reopenOn?: Snapshot }>(
    plugins: PluginEntry[],
    first: (world: CanvasWorld, sticky: TestDatabase) => Promise<T>,
    second: (world: CanvasWorld, state: T, logs: () => string) => Promise<void>,
  ): Promise<void> {
    const sticky = stickyDatabase(database);
    const one = await startCanvasWorld({ database: sticky.database, plugins });
    let state: T | undefined;
    try {
      state = await first(one, sticky.database);
    } finally {
      await one.close();
    }
    const logs = captureLogs();
    const two = await startCanvasWorld({
      database: state.reopenOn?.database ?? sticky.database,
      dataDir: one.dataDir,
      replicas: { shared: false },
      plugins,
      logs: logs.stream,
    });
    try {
      await second(two, state, logs.text);
    } finally {
      await two.close();
      two.removeData();
      await state.reopenOn?.drop();
      await sticky.drop();
    }
  }

  it('a run waiting for approval survives a runtime restart and completes once approved', async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    await acrossRestart(
      [],
      async (first) => {
        const user = await canvasUser(first.stack, wallet);
        const events = await readSse(await execute(user, { workflow: approvalFlow }), waitingForApproval);
        return {
          runId: runIdOf(events),
          valueHash: events.find((e) => e.event === 'approval.required')?.data.valueHash as string,
        };
      },
      async (second, { runId, valueHash }, logs) => {
        // The restart says what it took up.
        expect(startLines(logs())).to.deep.equal([
          { msg: 'canvas: 1 run waiting for approval, 0 resumed', waiting: 1, resumed: 0 },
        ]);
        const again = await canvasUser(second.stack, wallet);
        const waiting = await again.client.json('GET', `/canvas/runs/${runId}`);
        expect(waiting.body.status).to.equal('waiting_approval');
        const decided = await again.client.json('POST', `/canvas/runs/${runId}/nodes/approve/decision`, {
          approved: true,
          valueHash,
        });
        expect(decided.status, JSON.stringify(decided.body)).to.equal(200);
        const rest = await eventsUntil(await again.client.send('GET', `/canvas/runs/${runId}/events`));
        expect(rest.some((e) => e.event === 'run.resumed')).to.equal(true);
        expect(rest.at(-1)?.data.status).to.equal('succeeded');
        const written = join(second.dataDir, 'runs', runId, 'workspace', 'write.json');
        expect(JSON.parse(readFileSync(written, 'utf8'))).to.equal('<h1>Hello</h1>');
      },
    );
  });

  it('a stream open when the runtime closes ends with a shutdown event; from its lastEventId the next runtime goes on', async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    await acrossRestart(
      [],
      async (first) => {
        const user = await canvasUser(first.stack, wallet);
        const started = await readSse(await execute(user, { workflow: approvalFlow }), waitingForApproval);
        const runId = runIdOf(started);
        const res = await user.client.send('GET', `/canvas/runs/${runId}/events`);
        const reader = (res.body as ReadableStream<Uint8Array>).getReader();
        const decoder = new TextDecoder();
        let text = '';
        while (!text.includes('"status":"waiting_approval"'))
          text += decoder.decode((await reader.read()).value, { stream: true });
        await first.stack.runtime.close();
        for (let part = await reader.read(); !part.done; part = await reader.read())
          text += decoder.decode(part.value, { stream: true });
        const events = parseSse(text);
        expect(events.at(-1)).to.deep.equal({
          event: 'shutdown',
          data: { runId, lastEventId: String(events.at(-2)?.data.seq), reason: 'runtime_stopping' },
        });
        return { runId, lastEventId: events.at(-1)?.data.lastEventId as string };
      },
      async (second, { runId, lastEventId }) => {
        const user = await canvasUser(second.stack, wallet);
        const decided = await user.client.json('POST', `/canvas/runs/${runId}/nodes/approve/decision`, {
          approved: true,
        });
        expect(decided.status, JSON.stringify(decided.body)).to.equal(200);
        const rest = await eventsUntil(
          await user.client.send('GET', `/canvas/runs/${runId}/events?after=${lastEventId}`),
        );
        expect(rest[0]?.data.seq).to.equal(Number(lastEventId) + 1);
        expect(rest[0]?.event).to.equal('run.resumed');
        expect(rest.at(-1)?.data.status).to.equal('succeeded');
      },
    );
  });

  it('stores a model turn’s success before the run goes on: a crash then, and the next runtime neither runs nor charges it again', async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    await acrossRestart(
      LLM_NODE,
      async (first, sticky) => {
        const user = await fundedCanvasUser(first.stack, USD, wallet);
        let reopenOn: Snapshot | undefined;
        // The moment `after` starts, the run has gone on past the model turn: what a crash then leaves.
        observe(async () => {
          reopenOn ??= await snapshotDatabase(first.stack.kernel.db, sticky);
        });
        try {
          const events = await eventsUntil(
            await execute(user, {
              workflow: workflow(
                [
                  // Retries, so that after a crash a node not stored as done would be run (and charged) again.
                  { id: 'draft', kind: 'llm', params: { prompt: 'hello there world' }, retries: 2 },
                  { id: 'after', kind: 'observe', retries: 2 },
                ],
                ['draft.text -> after.after'],
              ),
            }),
          );
          expect(events.at(-1)?.data.status).to.equal('succeeded');
          if (!reopenOn) throw new Error('the observe node never started');
          return { runId: runIdOf(events), reopenOn };
        } finally {
          observe();
        }
      },
      async (second, { runId }, logs) => {
        expect(startLines(logs())).to.deep.equal([
          { msg: 'canvas: 0 runs waiting for approval, 1 resumed', waiting: 0, resumed: 1 },
        ]);
        await expectModelTurnChargedOnce(second.stack, await canvasUser(second.stack, wallet), runId);
      },
    );
  });

  it('charges a model turn once across a restart while the run waits for approval; the run’s charged is the ledger’s', async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    await acrossRestart(
      LLM_NODE,
      async (first) => {
        const user = await fundedCanvasUser(first.stack, USD, wallet);
        const events = await readSse(
          await execute(user, {
            workflow: workflow(
              [
                { id: 'draft', kind: 'llm', params: { prompt: 'a page about canvases' } },
                { id: 'approve', kind: 'gate' },
                { id: 'write', kind: 'record' },
              ],
              ['draft.text -> approve.value', 'approve.value -> write.value'],
            ),
          }),
          waitingForApproval,
        );
        expect(events.filter((e) => e.event === 'cost').map((e) => e.data.nodeId)).to.deep.equal(['draft']);
        expect(modelTurnsServed(first.stack)).to.equal(1);
        return { runId: runIdOf(events) };
      },
      async (second, { runId }) => {
        const user = await canvasUser(second.stack, wallet);
        const decided = await user.client.json('POST', `/canvas/runs/${runId}/nodes/approve/decision`, {
          approved: true,
        });
        expect(decided.status, JSON.stringify(decided.body)).to.equal(200);
        await expectModelTurnChargedOnce(second.stack, user, runId);
      },
    );
  });

  describe('ownership and approvals', () => {
    let world: CanvasWorld;
    before(async () => {
      world = await startCanvasWorld({ database, canvas: { requireSignedApprovals: false } });
    });
    after(async () => {
      await world.close();
      world.removeData();
    });

    it('another wallet sees none of a run or workflow (404) and cannot approve or cancel it', async () => {
      const owner = await canvasUser(world.stack);
      const other = await canvasUser(world.stack);
      const events = await readSse(await execute(owner, { workflow: approvalFlow }), waitingForApproval);
      const runId = runIdOf(events);
      const saved = await owner.client.json('POST', '/canvas/workflows', { workflow: approvalFlow });
      expect(saved.status).to.equal(201);
      for (const [method, path, body] of [
        ['GET', `/canvas/runs/${runId}`],
        ['GET', `/canvas/runs/${runId}/events`],
        ['POST', `/canvas/runs/${runId}/cancel`],
        ['POST', `/canvas/runs/${runId}/nodes/approve/decision`, { approved: true }],
        ['GET', `/canvas/workflows/${saved.body.id}`],
        ['PUT', `/canvas/workflows/${saved.body.id}`, { workflow: approvalFlow }],
        ['DELETE', `/canvas/workflows/${saved.body.id}`],
      ] as const) {
        const res = await other.client.send(method, path, body);
        expect(res.status, `${method} ${path}`).to.equal(404);
      }
      expect((await other.client.json('GET', '/canvas/runs')).body.runs).to.deep.equal([]);
      const unauthenticated = await fetch(world.stack.url('runtime', `/canvas/runs/${runId}`));
      expect(unauthenticated.status).to.equal(401);
      const state = await owner.client.json('GET', `/canvas/runs/${runId}`);
      expect(state.body.status).to.equal('waiting_approval');
      await owner.client.json('POST', `/canvas/runs/${runId}/cancel`);
      expect(
        (await eventsUntil(await owner.client.send('GET', `/canvas/runs/${runId}/events`))).at(-1)?.data
          .status,
      ).to.equal('cancelled');
    });

    it('takes a signed decision only with the owner’s signature over this run, node and value', async () => {
      const owner = await canvasUser(world.stack);
      const events = await readSse(await execute(owner, { workflow: approvalFlow }), waitingForApproval);
      const runId = runIdOf(events);
      const request = events.find((e) => e.event === 'approval.required')?.data as {
        valueHash: string;
        message: string;
      };
      expect(request.message).to.equal(approvalMessage(runId, 'approve', request.valueHash, true));
      const stranger = privateKeyToAccount(generatePrivateKey());
      const decide = (body: Record<string, unknown>) =>
        owner.client.json('POST', `/canvas/runs/${runId}/nodes/approve/decision`, body);
      const forged = await decide({
        approved: true,
        signature: await stranger.signMessage({ message: request.message }),
      });
      expect(forged.status).to.equal(403);
      expect(forged.body.details.reason).to.equal('approval_signature_invalid');
      const otherRun = approvalMessage(
        '00000000-0000-4000-8000-000000000000',
        'approve',
        request.valueHash,
        true,
      );
      const replayed = await decide({
        approved: true,
        signature: await owner.wallet.signMessage({ message: otherRun }),
      });
      expect(replayed.status).to.equal(403);
      const flipped = await decide({
        approved: false,
        signature: await owner.wallet.signMessage({ message: request.message }),
      });
      expect(flipped.status).to.equal(403);
      const wrongValue = await decide({ approved: true, valueHash: '0'.repeat(64) });
      expect(wrongValue.status).to.equal(409);
      expect((await owner.client.json('GET', `/canvas/runs/${runId}`)).body.status).to.equal(
        'waiting_approval',
      );
      const signed = await decide({
        approved: true,
        signature: await owner.wallet.signMessage({ message: request.message }),
      });
      expect(signed.status).to.equal(200);
      const rest = await eventsUntil(await owner.client.send('GET', `/canvas/runs/${runId}/events`));
      expect(rest.find((e) => e.event === 'approval.decided')?.data.signature).to.match(/^0x/);
      expect(rest.at(-1)?.data.status).to.equal('succeeded');
      const again = await decide({ approved: true });
      expect(again.status).to.equal(409);
    });

    it("serves the run's workspace read-only at its preview URL, never .git nor outside it", async () => {
      const owner = await canvasUser(world.stack);
      const events = await readSse(await execute(owner, { workflow: approvalFlow }), waitingForApproval);
      const runId = runIdOf(events);
      const previewPath = new URL(events[0]?.data.previewUrl as string).pathname;
      expect(previewPath).to.match(/^\/canvas\/preview\/[A-Za-z0-9_-]{32}\/$/);
      await owner.client.json('POST', `/canvas/runs/${runId}/nodes/approve/decision`, { approved: true });
      await eventsUntil(await owner.client.send('GET', `/canvas/runs/${runId}/events`));
      const page = await fetch(world.stack.url('runtime', `${previewPath}write.json`));
      expect(page.status).to.equal(200);
      expect(await page.json()).to.equal('<h1>Hello</h1>');
      expect(page.headers.get('content-security-policy')).to.match(/^sandbox/);
      for (const path of ['.git/config', '../../../etc/passwd', '%2e%2e/%2e%2e/etc/passwd', 'missing.html'])
        expect((await fetch(world.stack.url('runtime', `${previewPath}${path}`))).status, path).to.equal(404);
      const wrongToken = previewPath.replace(/preview\/[^/]+/, `preview/${'A'.repeat(32)}`);
      expect((await fetch(world.stack.url('runtime', `${wrongToken}write.json`))).status).to.equal(404);
    });

    it('saves, versions, lists and deletes workflows, and runs a saved one by id', async () => {
      const owner = await canvasUser(world.stack);
      const created = await owner.client.json('POST', '/canvas/workflows', {
        workflow: workflow([{ id: 'a', kind: 'emit' }]),
      });
      const { id } = created.body;
      const updated = await owner.client.json('PUT', `/canvas/workflows/${id}`, {
        workflow: { ...workflow([{ id: 'a', kind: 'emit', params: { value: 2 } }]), name: 'second' },
        expectedVersion: 1,
      });
      expect(updated.body.version).to.equal(2);
      const stale = await owner.client.json('PUT', `/canvas/workflows/${id}`, {
        workflow: workflow([{ id: 'a', kind: 'emit' }]),
        expectedVersion: 1,
      });
      expect(stale.status).to.equal(409);
      const invalid = await owner.client.json('PUT', `/canvas/workflows/${id}`, {
        workflow: workflow([{ id: 'a', kind: 'nope' }]),
      });
      expect(invalid.status).to.equal(400);
      expect(
        (await owner.client.json('GET', `/canvas/workflows/${id}/versions`)).body.versions.map(
          (v: { version: number }) => v.version,
        ),
      ).to.deep.equal([1, 2]);
      expect((await owner.client.json('GET', '/canvas/workflows')).body.workflows).to.have.length(1);
      const byId = await eventsUntil(await execute(owner, { workflowId: id }));
      expect(byId.find((e) => e.event === 'node.output')?.data.outputs).to.deep.equal({ value: 2 });
      const v1 = await eventsUntil(await execute(owner, { workflowId: id, version: 1 }));
      expect(v1.find((e) => e.event === 'node.output')?.data.outputs).to.deep.equal({ value: null });
      expect((await owner.client.send('DELETE', `/canvas/workflows/${id}`)).status).to.equal(204);
      expect((await owner.client.send('GET', `/canvas/workflows/${id}`)).status).to.equal(404);
    });
  });
});
