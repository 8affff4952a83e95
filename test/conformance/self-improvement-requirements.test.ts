import { expect } from 'chai';
import type { ServerResponse } from 'node:http';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import { serve } from '../../services/serve.ts';
import { openTestKernel } from '../support/kernel.ts';
import { certifyGroup, runRequirements, startTinyServer, type TinyServer } from './support.ts';

const IDS = REQUIREMENTS.filter((requirement) => requirement.groups?.includes('self-improvement')).map(
  (requirement) => requirement.id,
);
const SCHEDULES = ['after_each', 'daily', 'weekly', 'biweekly'];

/** What a proxy in front of a real runtime breaks, each the way a faulty runtime would. */
interface Faults {
  /** Answers POST /wallet/self-improvement/trigger 404: a runtime without the route. */
  hidesTrigger?: boolean;
  /** Answers any schedule 200 without storing it: a runtime that validates nothing. */
  acceptsAnySchedule?: boolean;
  /** Reads history and status with the token of the last wallet that triggered: runs shown to anyone. */
  sharesRuns?: boolean;
  /** Answers every history with no runs: a trigger that leaves no entry. */
  forgetsRuns?: boolean;
  /** Answers GET /wallet/settings `{}`: a settings document without Sigil's field. */
  otherSettingsShape?: boolean;
}

function json(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(body));
}

/** A proxy in front of a real Sigil runtime that breaks one self-improvement rule. */
function startProxy(upstream: string, faults: Faults): Promise<TinyServer> {
  let lastTrigger: string | undefined;
  return startTinyServer((request, response) => {
    let raw = '';
    request.on('data', (chunk: Buffer) => (raw += chunk.toString()));
    request.on('end', () => {
      void (async () => {
        const route = `${request.method} ${new URL(request.url ?? '/', 'http://proxy').pathname}`;
        const headers: Record<string, string> = {};
        for (const name of ['authorization', 'content-type'])
          if (typeof request.headers[name] === 'string') headers[name] = request.headers[name];
        if (route === 'POST /wallet/self-improvement/trigger') {
          if (faults.hidesTrigger) return json(response, 404, { code: 'not_found', message: 'Not Found' });
          lastTrigger = headers.authorization;
        }
        if (route === 'PUT /wallet/settings' && faults.acceptsAnySchedule) {
          const body = JSON.parse(raw) as { selfImprovement?: { schedule?: string } };
          if (!SCHEDULES.includes(body.selfImprovement?.schedule ?? 'daily'))
            return json(response, 200, body);
        }
        if (route === 'GET /wallet/settings' && faults.otherSettingsShape && headers.authorization)
          return json(response, 200, {});
        if (route === 'GET /wallet/self-improvement/history' && faults.forgetsRuns && headers.authorization)
          return json(response, 200, { runs: [], nextCursor: null });
        if (route.startsWith('GET /wallet/self-improvement/') && faults.sharesRuns && lastTrigger)
          headers.authorization = lastTrigger;
        const answer = await fetch(new URL(request.url ?? '/', upstream), {
          method: request.method ?? 'GET',
          headers,
          ...(raw === '' ? {} : { body: raw }),
        });
        response.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? '' });
        response.end(await answer.text());
      })();
    });
  });
}

describe('self-improvement: conformance requirements (routes, schedule values, owner-only, history)', function () {
  this.timeout(120_000);
  let runtime: { url: string; stop(): Promise<void> };

  before(async () => {
    const kernel = await openTestKernel({ config: { runtime: { port: 0 } } });
    const serving = await serve(kernel, ['runtime']);
    runtime = { url: serving.urls.runtime as string, stop: () => serving.stop() };
  });
  after(() => runtime?.stop());

  it('the group self-improvement holds the four requirements', () => {
    expect(IDS).to.have.members([
      'RT-4.self-improvement-routes',
      'RT-4.self-improvement-schedule-values',
      'RT-5.self-improvement-owner-only',
      'RT-4.self-improvement-trigger-history',
    ]);
  });

  it('Sigil passes every one', async () => {
    const results = await runRequirements({ runtimeUrl: runtime.url, gatewayUrl: runtime.url }, IDS);
    for (const id of IDS) expect(results[id]?.status, `${id}: ${results[id]?.reason}`).to.equal('pass');
  });

  it('sigil conformance deployment --only self-improvement runs exactly these, and exits 0', async () => {
    const { code, output, results } = await certifyGroup(runtime.url, 'self-improvement');
    expect(code, output).to.equal(0);
    expect(results).to.have.deep.members(IDS.map((id) => [id, 'pass']));
  });

  describe('behind a proxy that breaks one rule', () => {
    let proxy: TinyServer | undefined;
    afterEach(async () => {
      await proxy?.close();
      proxy = undefined;
    });
    async function check(faults: Faults, id: string) {
      proxy = await startProxy(runtime.url, faults);
      return (await runRequirements({ runtimeUrl: proxy.url, gatewayUrl: proxy.url }, [id]))[id];
    }

    it('a missing trigger route fails the routes check, naming it', async () => {
      const result = await check({ hidesTrigger: true }, 'RT-4.self-improvement-routes');
      expect(result?.status).to.equal('fail');
      expect(result?.reason).to.match(
        /POST \/wallet\/self-improvement\/trigger without a session: expected HTTP 401.* got 404/,
      );
    });

    it('an invalid schedule taken fails the schedule check', async () => {
      const result = await check({ acceptsAnySchedule: true }, 'RT-4.self-improvement-schedule-values');
      expect(result?.status).to.equal('fail');
      expect(result?.reason).to.match(/schedule hourly: expected HTTP 400, got 200/);
    });

    it("a settings document without Sigil's field makes the schedule check not applicable, saying why", async () => {
      const result = await check({ otherSettingsShape: true }, 'RT-4.self-improvement-schedule-values');
      expect(result?.status).to.equal('not-applicable');
      expect(result?.reason).to.match(/has no selfImprovement\.schedule/);
    });

    it('runs shown to another wallet fail owner-only', async () => {
      const result = await check({ sharesRuns: true }, 'RT-5.self-improvement-owner-only');
      expect(result?.status).to.equal('fail');
      expect(result?.reason).to.match(/another wallet's history lists the owner's run/);
    });

    it('a trigger that leaves no history entry fails the history check', async () => {
      const result = await check({ forgetsRuns: true }, 'RT-4.self-improvement-trigger-history');
      expect(result?.status).to.equal('fail');
      expect(result?.reason).to.match(/does not list the triggered run/);
    });
  });
});
