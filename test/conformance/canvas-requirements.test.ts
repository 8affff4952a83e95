import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { PluginEntry } from '../../core/config/schema.ts';
import { CYCLE_OPENED, textDag } from '../../conformance/deployment/canvas/workflows.ts';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import type { Kernel } from '../../services/kernel.ts';
import { serve } from '../../services/serve.ts';
import { pluginsWithLocalProvider } from '../services/runtime/support.ts';
import { openTestKernel } from '../support/kernel.ts';
import { startCanvasProxy, type CanvasFaults } from './canvas-proxy.ts';
import { certifyGroup, runRequirements, statuses } from './support.ts';
import type { TinyServer } from './support.ts';

const IDS = REQUIREMENTS.filter((requirement) => requirement.groups?.includes('canvas')).map(
  (requirement) => requirement.id,
);
const CANVAS_KINDS = ['canvas-transform', 'canvas-approval', 'canvas-workspace'];

const plugin = (resolve: string) => ({ resolve, enabled: true, options: {} }) as PluginEntry;

/** Sigil's runtime on a real kernel with `kinds` loaded (and provider-local, for the agents). */
async function startRuntime(kinds: readonly string[], canvas: Record<string, unknown> = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'sigil-canvas-conformance-'));
  const kernel = await openTestKernel({
    config: {
      runtime: { port: 0, canvas: { dataDir, ...canvas } as never },
      plugins: [...pluginsWithLocalProvider(), ...kinds.map(plugin)],
    },
  });
  const serving = await serve(kernel, ['runtime']);
  return {
    kernel,
    url: serving.urls.runtime as string,
    stop: async () => {
      await serving.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Runs not ended in the runtime's database: what a check left behind. */
const unfinishedRuns = async (kernel: Kernel) =>
  (await kernel.db('canvas_runs').whereNotIn('status', ['succeeded', 'failed', 'cancelled'])).length;

describe('canvas: conformance requirements (order, cycles, approvals, SSE, owner-only)', function () {
  this.timeout(120_000);

  it('the group canvas holds the six requirements', () => {
    expect(IDS).to.have.members([
      'RT-4.canvas-topological-order',
      'RT-4.canvas-cycle-refused',
      'RT-4.canvas-approval-enforced',
      'RT-6.canvas-sse-events',
      'RT-6.canvas-sse-resume',
      'RT-5.canvas-owner-only',
    ]);
  });

  describe('against Sigil with transform, approval and write-files', () => {
    let runtime: Awaited<ReturnType<typeof startRuntime>>;
    before(async () => {
      runtime = await startRuntime(CANVAS_KINDS);
    });
    after(() => runtime?.stop());

    it('passes every one, and leaves no run waiting', async () => {
      const results = await runRequirements({ runtimeUrl: runtime.url, gatewayUrl: runtime.url }, IDS);
      for (const id of IDS) expect(results[id]?.status, `${id}: ${results[id]?.reason}`).to.equal('pass');
      expect(await unfinishedRuns(runtime.kernel)).to.equal(0);
    });

    it('sigil conformance deployment --only canvas runs exactly these, and exits 0', async () => {
      const { code, output, results } = await certifyGroup(runtime.url, 'canvas');
      expect(code, output).to.equal(0);
      expect(results).to.have.deep.members(IDS.map((id) => [id, 'pass']));
    });

    describe('behind a proxy that breaks one rule', () => {
      let proxy: TinyServer | undefined;
      afterEach(async () => {
        await proxy?.close();
        proxy = undefined;
      });
      async function check(faults: CanvasFaults, ids: readonly string[]) {
        proxy = await startCanvasProxy(runtime.url, faults, textDag('conformance chain', CYCLE_OPENED));
        return runRequirements({ runtimeUrl: proxy.url, gatewayUrl: proxy.url }, ids);
      }

      it('a node started before its inputs fails the order, naming it', async () => {
        const results = await check({ startsTailEarly: true }, ['RT-4.canvas-topological-order']);
        expect(results['RT-4.canvas-topological-order']?.status).to.equal('fail');
        expect(results['RT-4.canvas-topological-order']?.reason).to.match(
          /node tail started before its input join succeeded/,
        );
      });

      it('events without ids fail the stream check and the resume', async () => {
        const results = await check({ dropsEventIds: true }, [
          'RT-6.canvas-sse-events',
          'RT-6.canvas-sse-resume',
        ]);
        expect(statuses(results)).to.deep.equal({
          'RT-6.canvas-sse-events': 'fail',
          'RT-6.canvas-sse-resume': 'fail',
        });
        expect(results['RT-6.canvas-sse-events']?.reason).to.match(/every event must carry an id/);
      });

      it('a resume that ignores Last-Event-ID fails, with what it gave', async () => {
        const results = await check({ ignoresLastEventId: true }, ['RT-6.canvas-sse-resume']);
        expect(results['RT-6.canvas-sse-resume']?.status).to.equal('fail');
        expect(results['RT-6.canvas-sse-resume']?.reason).to.match(
          /the stream gave \d+ events .*not the \d+ after it/,
        );
      });

      it('a cycle run instead of refused fails, and says so', async () => {
        const results = await check({ runsCycles: true }, ['RT-4.canvas-cycle-refused']);
        expect(results['RT-4.canvas-cycle-refused']?.status).to.equal('fail');
        expect(results['RT-4.canvas-cycle-refused']?.reason).to.match(/expected HTTP 400, got 200/);
      });

      it('an unguarded write taken fails the approval check', async () => {
        const results = await check({ takesUnguardedWrites: true }, ['RT-4.canvas-approval-enforced']);
        expect(results['RT-4.canvas-approval-enforced']?.status).to.equal('fail');
        expect(results['RT-4.canvas-approval-enforced']?.reason).to.match(/no approval upstream .* got 200/);
      });

      it('a signature not checked fails the approval check', async () => {
        const results = await check({ ignoresSignatures: true }, ['RT-4.canvas-approval-enforced']);
        expect(results['RT-4.canvas-approval-enforced']?.status).to.equal('fail');
        expect(results['RT-4.canvas-approval-enforced']?.reason).to.match(
          /signed by another key: expected HTTP 403, got 200/,
        );
      });

      it("another wallet's decision taken fails the check, and the waiting run is cancelled", async () => {
        const results = await check({ acceptsStrangerDecisions: true }, ['RT-4.canvas-approval-enforced']);
        expect(results['RT-4.canvas-approval-enforced']?.status).to.equal('fail');
        expect(results['RT-4.canvas-approval-enforced']?.reason).to.match(
          /another wallet's approval: expected HTTP 404, got 200/,
        );
        expect(await unfinishedRuns(runtime.kernel)).to.equal(0);
      });

      it('a run shown to another wallet fails owner-only', async () => {
        const results = await check({ sharesRuns: true }, ['RT-5.canvas-owner-only']);
        expect(results['RT-5.canvas-owner-only']?.status).to.equal('fail');
        expect(results['RT-5.canvas-owner-only']?.reason).to.match(
          /another wallet's GET \/canvas\/runs\/:id: expected HTTP 404, got 200/,
        );
      });
    });
  });

  describe('against Sigil that takes signed approvals only', () => {
    let runtime: Awaited<ReturnType<typeof startRuntime>>;
    before(async () => {
      runtime = await startRuntime(CANVAS_KINDS, { requireSignedApprovals: true });
    });
    after(() => runtime?.stop());

    it('the approval check passes: the owner signs its approval', async () => {
      const results = await runRequirements({ runtimeUrl: runtime.url, gatewayUrl: runtime.url }, [
        'RT-4.canvas-approval-enforced',
      ]);
      const approval = results['RT-4.canvas-approval-enforced'];
      expect(approval?.status, approval?.reason).to.equal('pass');
    });
  });

  describe('against Sigil with only transform', () => {
    let runtime: Awaited<ReturnType<typeof startRuntime>>;
    before(async () => {
      runtime = await startRuntime(['canvas-transform']);
    });
    after(() => runtime?.stop());

    it('the approval check is not applicable, naming the kinds it lacks; the rest pass', async () => {
      const results = await runRequirements({ runtimeUrl: runtime.url, gatewayUrl: runtime.url }, IDS);
      const approval = results['RT-4.canvas-approval-enforced'];
      expect(approval?.status).to.equal('not-applicable');
      expect(approval?.reason).to.match(/does not load approval, write-files/);
      for (const id of IDS.filter((id) => id !== 'RT-4.canvas-approval-enforced'))
        expect(results[id]?.status, `${id}: ${results[id]?.reason}`).to.equal('pass');
    });
  });

  describe('against Sigil with canvas off', () => {
    let runtime: Awaited<ReturnType<typeof startRuntime>>;
    before(async () => {
      runtime = await startRuntime(CANVAS_KINDS, { enabled: false });
    });
    after(() => runtime?.stop());

    it('every one is not applicable, saying /canvas answered 404', async () => {
      const results = await runRequirements({ runtimeUrl: runtime.url, gatewayUrl: runtime.url }, IDS);
      for (const id of IDS) {
        expect(results[id]?.status, id).to.equal('not-applicable');
        expect(results[id]?.reason).to.match(/no canvas workflows .*GET \/canvas\/node-kinds answered 404/);
      }
    });
  });
});
