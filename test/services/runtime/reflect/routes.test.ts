import { expect } from 'chai';
import { ManualClock } from '../../../../core/clock.ts';
import { PROVIDER_VAULT_MESSAGE } from '../../../../services/runtime/vault/index.ts';
import { newWallet } from '../../../core/auth/support.ts';
import { eventually } from '../../../support/eventually.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { readSse, runtimeClient } from '../chat-support.ts';
import { setOnChain } from '../ledger/support.ts';
import { internalKeyStack, type Stack } from '../support.ts';
import { RecordingPipeline, WEDNESDAY_NOON } from './support.ts';

const SLOT = 'PROVIDER_API_KEY';
const ROUTES = [
  ['GET', '/wallet/settings'],
  ['PUT', '/wallet/settings'],
  ['PATCH', '/wallet/settings'],
  ['GET', '/wallet/self-improvement/status'],
  ['POST', '/wallet/self-improvement/trigger'],
  ['GET', '/wallet/self-improvement/history'],
] as const;

describe('self-improvement routes: settings, status, trigger, history (owner-only)', function () {
  this.timeout(180_000);

  describeEachDatabase('reflect routes', (database) => {
    let stack: Stack;
    let close: () => Promise<void>;
    let pipeline: RecordingPipeline;
    let clock: ManualClock;

    beforeEach(async () => {
      pipeline = new RecordingPipeline();
      clock = new ManualClock(WEDNESDAY_NOON);
      ({ stack, close } = await internalKeyStack(database, {
        operatorKey: 'sk-internal-operator-key-reflect',
        chat: { maxOutputTokens: 8 },
        clock,
        reflectPipeline: pipeline,
      }));
    });
    afterEach(() => close?.());

    async function user() {
      const wallet = newWallet();
      const jwt = await stack.signIn(wallet);
      return { wallet, jwt, client: runtimeClient(stack.url('runtime'), jwt) };
    }

    const settled = () => stack.runtime.reflect.scheduler.settled();

    it('every route needs a session (401); an unknown path under them is 404; all are in the OpenAPI document', async () => {
      for (const [method, path] of ROUTES) {
        const res = await stack.send('runtime', method, path, method === 'PUT' ? {} : undefined);
        expect(res.status, `${method} ${path}`).to.equal(401);
        expect(((await res.json()) as { code: string }).code).to.equal('unauthorized');
      }
      const { client } = await user();
      expect((await client.json('GET', '/wallet/self-improvement/runs')).status).to.equal(404);
      const openapi = (await (await stack.get('runtime', '/openapi.json')).json()) as {
        paths: Record<string, Record<string, unknown>>;
      };
      for (const [method, path] of ROUTES)
        expect(openapi.paths[path], `${method} ${path}`).to.have.property(method.toLowerCase());
    });

    it('settings: the defaults until saved; PUT replaces the document; status follows it', async () => {
      const { client } = await user();
      const defaults = await client.json('GET', '/wallet/settings');
      expect(defaults).to.deep.equal({
        status: 200,
        body: { selfImprovement: { enabled: true, useInChats: true, schedule: 'daily' } },
      });
      for (const schedule of ['after_each', 'daily', 'weekly', 'biweekly']) {
        const put = await client.json('PUT', '/wallet/settings', { selfImprovement: { schedule } });
        expect(put).to.deep.equal({
          status: 200,
          body: { selfImprovement: { enabled: true, useInChats: true, schedule } },
        });
        expect((await client.json('GET', '/wallet/settings')).body.selfImprovement.schedule).to.equal(
          schedule,
        );
      }
      const status = await client.json('GET', '/wallet/self-improvement/status');
      expect(status.status).to.equal(200);
      expect(status.body).to.deep.include({
        enabled: true,
        schedule: 'biweekly',
        nextRunAt: '2026-03-30T00:00:00.000Z',
        currentRun: null,
        lastRun: null,
        counts: { facets: 0, learnings: 0, skills: 0 },
        pipelineVersion: pipeline.version,
      });
      // A field left out takes its default: enabled, here.
      await client.json('PUT', '/wallet/settings', { selfImprovement: { enabled: false } });
      const off = await client.json('GET', '/wallet/self-improvement/status');
      expect([off.body.enabled, off.body.schedule, off.body.nextRunAt]).to.deep.equal([false, 'daily', null]);
    });

    it('PATCH changes only the fields given; bad input is a 400 that changes nothing', async () => {
      const { client } = await user();
      await client.json('PUT', '/wallet/settings', { selfImprovement: { schedule: 'after_each' } });
      const patched = await client.json('PATCH', '/wallet/settings', {
        selfImprovement: { useInChats: false },
      });
      expect(patched).to.deep.equal({
        status: 200,
        body: { selfImprovement: { enabled: true, useInChats: false, schedule: 'after_each' } },
      });
      await client.json('PATCH', '/wallet/settings', { selfImprovement: { schedule: 'weekly' } });
      expect((await client.json('GET', '/wallet/settings')).body).to.deep.equal({
        selfImprovement: { enabled: true, useInChats: false, schedule: 'weekly' },
      });
      expect((await client.json('GET', '/wallet/self-improvement/status')).body.nextRunAt).to.equal(
        '2026-03-23T00:00:00.000Z',
      );
      expect((await client.json('PATCH', '/wallet/settings', {})).body.selfImprovement.schedule).to.equal(
        'weekly',
      );
      for (const [body, path] of [
        [{ selfImprovement: { schedule: 'hourly' } }, 'body.selfImprovement.schedule'],
        [{ selfImprovement: { useInChats: 'no' } }, 'body.selfImprovement.useInChats'],
        [{ selfImprovement: { hour: 3 } }, 'body.selfImprovement'],
        [{ other: {} }, 'body'],
      ] as const) {
        const refused = await client.json('PATCH', '/wallet/settings', body);
        expect(refused.status, JSON.stringify(body)).to.equal(400);
        expect(refused.body.details.issues[0].path).to.equal(path);
      }
      expect((await client.json('GET', '/wallet/settings')).body).to.deep.equal({
        selfImprovement: { enabled: true, useInChats: false, schedule: 'weekly' },
      });
    });

    it('400 for an invalid schedule (naming body.selfImprovement.schedule), a wrong type or an unknown field; nothing changes', async () => {
      const { client } = await user();
      await client.json('PUT', '/wallet/settings', { selfImprovement: { schedule: 'weekly' } });
      const before = await client.json('GET', '/wallet/self-improvement/status');
      const refusals = [
        [{ selfImprovement: { schedule: 'hourly' } }, 'body.selfImprovement.schedule'],
        [{ selfImprovement: { schedule: 'WEEKLY' } }, 'body.selfImprovement.schedule'],
        [{ selfImprovement: { enabled: 'yes' } }, 'body.selfImprovement.enabled'],
        [{ selfImprovement: { schedule: 'daily', hour: 3 } }, 'body.selfImprovement'],
        [{ selfimprovement: { schedule: 'daily' } }, 'body'],
        [[], 'body'],
      ] as const;
      for (const [body, path] of refusals) {
        const refused = await client.json('PUT', '/wallet/settings', body);
        expect(refused.status, JSON.stringify(body)).to.equal(400);
        expect(refused.body.code).to.equal('invalid_request');
        expect(refused.body.details.issues[0].path, JSON.stringify(body)).to.equal(path);
      }
      expect((await client.json('GET', '/wallet/settings')).body.selfImprovement.schedule).to.equal('weekly');
      expect(await client.json('GET', '/wallet/self-improvement/status')).to.deep.equal(before);
    });

    it('trigger: 202 with the new run, 200 with the one under way; then history and status show what it produced and cost', async () => {
      const { client, wallet } = await user();
      const held = pipeline.holdNext();
      const started = await client.json('POST', '/wallet/self-improvement/trigger');
      expect(started.status).to.equal(202);
      expect(started.body.created).to.equal(true);
      expect(started.body.run).to.deep.include({
        trigger: 'manual',
        status: 'running',
        outcome: null,
        cost: null,
        error: null,
      });
      const job = await held.started;
      expect(job.principal?.address).to.equal(wallet.address);
      const again = await client.json('POST', '/wallet/self-improvement/trigger', {});
      expect(again.status).to.equal(200);
      expect([again.body.created, again.body.run.id]).to.deep.equal([false, started.body.run.id]);
      expect((await client.json('GET', '/wallet/self-improvement/status')).body.currentRun.id).to.equal(
        started.body.run.id,
      );
      expect((await client.json('POST', '/wallet/self-improvement/trigger', { now: true })).status).to.equal(
        400,
      );
      held.release();
      await settled();

      const history = await client.json('GET', '/wallet/self-improvement/history');
      expect(history.status).to.equal(200);
      expect(history.body.nextCursor).to.equal(null);
      expect(history.body.runs).to.have.length(1);
      const [run] = history.body.runs as Record<string, unknown>[];
      expect(run).to.deep.include({
        id: started.body.run.id,
        status: 'succeeded',
        trigger: 'manual',
        pipelineVersion: pipeline.version,
        attempts: 1,
        resumes: 0,
        error: null,
        outcome: {
          sessions: 1,
          facets: 2,
          learnings: 1,
          skills: 0,
          produced: { facets: ['facet-1-a', 'facet-1-b'], learnings: ['learning-1'], skills: [] },
        },
        cost: { llmCalls: 2, inputTokens: 100, outputTokens: 10, charged: '1000' },
      });
      const status = await client.json('GET', '/wallet/self-improvement/status');
      expect(status.body.currentRun).to.equal(null);
      expect(status.body.lastRun).to.deep.equal(run);
      expect(status.body.counts).to.deep.equal({ facets: 2, learnings: 1, skills: 0 });
    });

    it("owner-only: another wallet sees none of a wallet's settings, runs or counts", async () => {
      const owner = await user();
      const other = await user();
      await owner.client.json('PUT', '/wallet/settings', { selfImprovement: { schedule: 'after_each' } });
      await owner.client.json('POST', '/wallet/self-improvement/trigger');
      await settled();
      expect((await other.client.json('GET', '/wallet/settings')).body.selfImprovement.schedule).to.equal(
        'daily',
      );
      expect((await other.client.json('GET', '/wallet/self-improvement/history')).body.runs).to.deep.equal(
        [],
      );
      const status = await other.client.json('GET', '/wallet/self-improvement/status');
      expect(status.body).to.deep.include({
        currentRun: null,
        lastRun: null,
        nextRunAt: null,
        counts: { facets: 0, learnings: 0, skills: 0 },
      });
      // Its own trigger starts its own run, not the owner's.
      const started = await other.client.json('POST', '/wallet/self-improvement/trigger');
      expect(started.status).to.equal(202);
      await settled();
      expect(pipeline.jobs.map((job) => job.wallet)).to.deep.equal([
        owner.wallet.address,
        other.wallet.address,
      ]);
    });

    it('history: newest first by pages, each page after the cursor; a cursor it never gave is 400', async () => {
      const { client } = await user();
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        ids.unshift((await client.json('POST', '/wallet/self-improvement/trigger')).body.run.id as string);
        await settled();
        clock.advance(1000);
      }
      const first = await client.json('GET', '/wallet/self-improvement/history?limit=2');
      expect(first.body.runs.map((run: { id: string }) => run.id)).to.deep.equal(ids.slice(0, 2));
      const second = await client.json(
        'GET',
        `/wallet/self-improvement/history?limit=2&cursor=${first.body.nextCursor as string}`,
      );
      expect(second.body.runs.map((run: { id: string }) => run.id)).to.deep.equal(ids.slice(2));
      expect(second.body.nextCursor).to.equal(null);
      for (const query of ['cursor=bm90LWEtY3Vyc29y', 'limit=0', 'limit=500', 'order=asc']) {
        const refused = await client.json('GET', `/wallet/self-improvement/history?${query}`);
        expect(refused.status, query).to.equal(400);
      }
    });

    it('waiting_for_unlock: with the vault locked the run waits; unlocking the vault runs it with that session', async () => {
      pipeline.key = (principal) =>
        principal
          ? stack.runtime.vault.providerKey(principal, SLOT).then(
              () => true,
              () => false,
            )
          : Promise.resolve(false);
      const wallet = newWallet();
      const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
      const storing = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      expect(
        (
          await storing.json('PUT', `/wallet/provider-vault/keys/${SLOT}`, {
            apiKey: 'sk-wallet-own',
            signature,
          })
        ).status,
      ).to.equal(201);
      // A second session of the wallet has not unlocked: its run finds no key.
      const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      const started = await client.json('POST', '/wallet/self-improvement/trigger');
      await settled();
      const waiting = (await client.json('GET', '/wallet/self-improvement/status')).body.currentRun;
      expect(waiting).to.deep.include({ id: started.body.run.id, status: 'waiting_for_unlock' });
      expect(waiting.retryAt).to.equal(new Date(WEDNESDAY_NOON + 900_000).toISOString());
      expect(waiting.error.code).to.equal('forbidden');

      expect((await client.json('POST', '/wallet/provider-vault/unlock', { signature })).status).to.equal(
        200,
      );
      const done = await eventually('the waiting run to succeed after the unlock', async () => {
        const status = (await client.json('GET', '/wallet/self-improvement/status')).body;
        return status.lastRun?.status === 'succeeded' && status.lastRun;
      });
      expect([done.id, done.attempts]).to.deep.equal([started.body.run.id, 2]);
      await settled();
      expect(pipeline.jobs).to.have.length(2);
    });

    it('after_each: each completed chat message pushes the run back (the chat tells the scheduler)', async () => {
      const { client, wallet } = await user();
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, 1_000_000n);
      await client.json('PUT', '/wallet/settings', { selfImprovement: { schedule: 'after_each' } });
      const nextRunAt = async () =>
        (await client.json('GET', '/wallet/self-improvement/status')).body.nextRunAt as string | null;
      expect(await nextRunAt()).to.equal(new Date(WEDNESDAY_NOON + 60_000).toISOString());
      clock.advance(30_000);
      const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body
        .id as string;
      const session = (await client.json('POST', `/agents/${agentId}/sessions`, {})).body.id as string;
      const res = await client.send('POST', `/agents/${agentId}/sessions/${session}/messages`, {
        content: 'always answer in metric units',
      });
      expect((await readSse(res)).map((event) => event.event)).to.include('done');
      const pushedTo = new Date(WEDNESDAY_NOON + 90_000).toISOString();
      await eventually('the message to push the run back', async () => (await nextRunAt()) === pushedTo);
    });
  });
});
