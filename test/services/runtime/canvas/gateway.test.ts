import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { loadConfig } from '../../../../services/config.ts';
import { ProbeWorld } from '../../gateway/support.ts';
import type { SseEvent } from '../chat-support.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import {
  type CanvasWorld,
  eventsUntil,
  execute,
  fundedCanvasUser,
  startCanvasWorld,
  workflow,
} from './support.ts';

const USD = 1_000_000n;

const outputOf = (events: SseEvent[], nodeId: string) =>
  events.find((e) => e.event === 'node.output' && e.data.nodeId === nodeId)?.data.outputs as
    Record<string, unknown> | undefined;

/** What runtime.canvas.teamMode is when the operator sets RUNTIME_CANVAS_TEAM_MODE=true (no config file). */
function teamModeFromEnv(): boolean {
  const dir = mkdtempSync(join(tmpdir(), 'sigil-canvas-env-'));
  try {
    return loadConfig({ cwd: dir, env: { RUNTIME_CANVAS_TEAM_MODE: 'true' } }).config.runtime.canvas.teamMode;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Tool and team nodes run by the executor against a real gateway: the probe MCP server published to
 * a real npm registry, installed by the gateway and run in its sandbox, called through the runtime's
 * delegated path in the run's own gateway session; model turns on the local stand-in LLM.
 */
describe('canvas nodes through a real gateway', function () {
  this.timeout(240_000);
  let probe: ProbeWorld;
  before(async () => {
    probe = await ProbeWorld.start();
  });
  after(() => probe?.stop());

  describeEachDatabase('canvas tool and team nodes', (database) => {
    let world: CanvasWorld;
    before(async () => {
      world = await startCanvasWorld({
        database,
        probe,
        canvas: { teamMode: teamModeFromEnv() },
        plugins: ['canvas-gateway', 'canvas-team'].map((resolve) => ({
          resolve,
          enabled: true,
          options: {},
        })),
      });
    });
    after(async () => {
      await world?.close();
      world?.removeData();
    });

    const fundedUser = () => fundedCanvasUser(world.stack, USD);

    it("a tool node outputs a real MCP tool's structured content beside its text, charged as one tool call", async () => {
      const user = await fundedUser();
      const events = await eventsUntil(
        await execute(user, {
          workflow: workflow(
            [
              {
                id: 'add',
                kind: 'tool',
                params: { server: 'probe', tool: 'sum', arguments: { a: 2, b: 3 } },
              },
              { id: 'keep', kind: 'join' },
            ],
            ['add.structured -> keep.a'],
          ),
        }),
      );
      expect(events.at(-1)?.data, JSON.stringify(events.at(-1))).to.deep.include({
        status: 'succeeded',
        charged: '500',
      });
      expect(outputOf(events, 'add')).to.deep.equal({ text: '5', isError: false, structured: { sum: 5 } });
      expect(outputOf(events, 'keep')).to.deep.equal({ value: [{ sum: 5 }, null] });
      const cost = events.find((e) => e.event === 'cost')?.data;
      expect(cost).to.deep.include({
        nodeId: 'add',
        kind: 'tool',
        server: 'probe',
        tool: 'sum',
        charged: '500',
      });
    });

    it('team mode (RUNTIME_CANVAS_TEAM_MODE): the orchestrator plans, teammates work with their own gateway tools, results merged; plan and steps streamed', async () => {
      const user = await fundedUser();
      // The stand-in echoes the user message: the goal is the plan, an instruction the teammate's
      // first answer, and the probe's echo the researcher's next one.
      const finish = (result: string) => JSON.stringify({ action: 'finish', result });
      const research = JSON.stringify({
        action: 'call',
        tool: 'probe__echo',
        arguments: { message: finish('the probe said hi') },
      });
      const plan = {
        tasks: [
          { teammate: 'researcher', instruction: research },
          { teammate: 'writer', instruction: finish('a short text') },
        ],
      };
      const events = await eventsUntil(
        await execute(user, {
          workflow: workflow(
            [
              {
                id: 'team',
                kind: 'team',
                params: {
                  inputs: { goal: 'string' },
                  goal: '{{ inputs.goal }}',
                  teammates: [
                    {
                      name: 'researcher',
                      instructions: 'You look things up.',
                      servers: ['probe'],
                      maxSteps: 3,
                    },
                    { name: 'writer', instructions: 'You write.', maxSteps: 1 },
                  ],
                },
              },
            ],
            ['$inputs.goal -> team.goal'],
            { inputs: { goal: { type: 'string' } } },
          ),
          inputs: { goal: JSON.stringify(plan) },
        }),
      );
      expect(events.at(-1)?.data.status, JSON.stringify(events.at(-1))).to.equal('succeeded');
      const outputs = outputOf(events, 'team');
      expect(outputs?.plan).to.deep.equal(plan);
      expect(outputs?.result).to.equal(
        '## 1. researcher\n\nthe probe said hi\n\n## 2. writer\n\na short text',
      );
      const logs = events
        .filter((e) => e.event === 'node.log' && e.data.nodeId === 'team')
        .map((e) => e.data as { message: string; data?: Record<string, unknown> });
      expect(logs.find((log) => log.message === 'plan: 2 tasks')?.data).to.deep.equal({ plan });
      expect(logs.map((log) => log.message)).to.include.members([
        'researcher (task 1) step 1: calling probe__echo',
        'researcher (task 1) step 1: probe__echo returned',
        'researcher (task 1) finished at step 2',
        'writer (task 2) finished at step 1',
      ]);
      // Four model turns (the plan, two researcher steps, one writer step) and one tool call, each charged.
      const costs = events.filter((e) => e.event === 'cost').map((e) => e.data);
      expect(costs.map((cost) => cost.kind).sort()).to.deep.equal(['llm', 'llm', 'llm', 'llm', 'tool']);
      const total = costs.reduce((sum, cost) => sum + BigInt(cost.charged as string), 0n);
      expect(events.at(-1)?.data.charged).to.equal(total.toString());
    });
  });
});
