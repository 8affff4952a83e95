import { expect } from 'chai';
import type { CanvasNodeV2, CanvasServicesV2 } from '@sigil/plugin-api';
import { canvasTestContext, describeCanvasNodeKitV2 } from '@sigil/plugin-api/kit';
import { startStandIn, type StandIn } from '@sigil/plugin-api/llm/stand-in';
import teamPlugin from '../../../plugins/canvas/team/index.ts';
import { quietLogger } from '../../support/kernel.ts';
import {
  mcpGateway,
  type McpGateway,
  nodeOf,
  NOT_APPLICABLE_TO_HOSTED_READS,
  standInLlm,
  toolServer,
} from './host-services.ts';

/**
 * The `team` node kind against the real stand-in LLM and a real MCP server. The stand-in echoes the
 * prompt, so a goal that is a JSON plan is the plan, an instruction that is a JSON action is the
 * teammate's first step, and a tool whose text is an action is the next step: every model turn of a
 * run is written out in its inputs.
 */
describe('canvas-team: the team node kind (team mode)', function () {
  this.timeout(60_000);
  let standIn: StandIn;
  let gateway: McpGateway;
  let node: CanvasNodeV2;
  before(async () => {
    standIn = await startStandIn();
    gateway = await mcpGateway({ tools: toolServer(), other: toolServer() });
    node = await nodeOf(teamPlugin);
  });
  after(async () => {
    await gateway.close();
    await standIn.close();
  });
  beforeEach(() => gateway.calls.splice(0));

  const call = (tool: string, args: Record<string, unknown>) =>
    JSON.stringify({ action: 'call', tool, arguments: args });
  const finish = (result: string) => JSON.stringify({ action: 'finish', result });
  /** A call of the echo tool whose text is the teammate's next answer. */
  const echoThen = (next: string) => call('tools__echo', { text: next });
  const plan = (...tasks: [string, string][]) =>
    JSON.stringify({ tasks: tasks.map(([teammate, instruction]) => ({ teammate, instruction })) });

  const researcher = {
    name: 'researcher',
    instructions: 'You look things up.',
    servers: ['tools'],
    maxSteps: 3,
  };
  const writer = { name: 'writer', instructions: 'You write.', maxSteps: 1 };

  async function run(
    params: Record<string, unknown>,
    goal: string,
    options: {
      services?: Partial<CanvasServicesV2>;
      signal?: AbortSignal;
      answer?: (text: string) => string;
    } = {},
  ) {
    const llm = standInLlm(standIn, options.answer);
    const { context, record, dispose } = await canvasTestContext({
      params: node.params.parse({ inputs: { goal: 'string' }, goal: '{{ inputs.goal }}', ...params }),
      inputs: { goal },
      services: {
        llm: llm.llm,
        callTool: gateway.callTool,
        listTools: gateway.listTools,
        ...options.services,
      },
      ...(options.signal ? { signal: options.signal } : {}),
    });
    try {
      const outcome: { outputs?: Record<string, unknown>; error?: unknown } = await node.run(context).then(
        (outputs) => ({ outputs }),
        (error: unknown) => ({ error }),
      );
      return { ...outcome, record, requests: llm.requests };
    } finally {
      await dispose();
    }
  }

  describeCanvasNodeKitV2(() => nodeOf(teamPlugin), { expectNotApplicable: NOT_APPLICABLE_TO_HOSTED_READS });

  describe('params and ports', () => {
    it('is a team-mode node that reads; outputs result, plan and contributions', () => {
      expect([node.teamMode, node.effect]).to.deep.equal([true, 'reads']);
      const ports = node.ports(
        node.params.parse({ inputs: { topic: 'string' }, goal: '{{ inputs.topic }}', teammates: [writer] }),
      );
      expect(ports.inputs).to.deep.equal({ topic: { type: 'string' } });
      expect(Object.entries(ports.outputs).map(([name, port]) => [name, port.type])).to.deep.equal([
        ['result', 'string'],
        ['plan', 'object'],
        ['contributions', 'array'],
      ]);
    });

    it('refuses two teammates of one name, a goal reading no declared input, and no teammate', () => {
      const refused = node.params.safeParse({
        goal: '{{ inputs.topic }}',
        teammates: [writer, { ...researcher, name: 'writer' }],
      });
      expect(refused.error?.issues.map((issue) => issue.path.join('.'))).to.have.members([
        'goal',
        'teammates.1.name',
      ]);
      expect(node.params.safeParse({ goal: 'g', teammates: [] }).success).to.equal(false);
    });

    it("holds params under the operator's ceilings", async () => {
      const bounded = await teamPlugin.create({
        config: teamPlugin.config.parse({ maxTasks: 2, maxSteps: 3, maxConcurrency: 1, maxTeammates: 1 }),
        deps: {},
        logger: quietLogger(),
      });
      const base = { goal: 'g', teammates: [writer] };
      expect(bounded.params.parse(base)).to.include({ maxTasks: 2, concurrency: 1 });
      for (const over of [
        { maxTasks: 3 },
        { concurrency: 2 },
        { teammates: [{ ...writer, maxSteps: 4 }] },
        { teammates: [writer, researcher] },
      ])
        expect(bounded.params.safeParse({ ...base, ...over }).success, JSON.stringify(over)).to.equal(false);
    });
  });

  describe('run', () => {
    it('plans, runs each teammate with its own tools, streams each step, and concatenates the results', async () => {
      const { outputs, record, requests } = await run(
        { teammates: [researcher, writer] },
        plan(['researcher', echoThen(finish('the echo said hi'))], ['writer', finish('a short text')]),
      );
      expect(outputs?.plan).to.deep.equal(
        JSON.parse(
          plan(['researcher', echoThen(finish('the echo said hi'))], ['writer', finish('a short text')]),
        ),
      );
      expect(outputs?.result).to.equal(
        '## 1. researcher\n\nthe echo said hi\n\n## 2. writer\n\na short text',
      );
      expect(outputs?.contributions).to.deep.equal([
        {
          teammate: 'researcher',
          instruction: echoThen(finish('the echo said hi')),
          result: 'the echo said hi',
          steps: [
            {
              step: 1,
              tool: 'tools__echo',
              arguments: { text: finish('the echo said hi') },
              isError: false,
              text: finish('the echo said hi'),
            },
          ],
        },
        { teammate: 'writer', instruction: finish('a short text'), result: 'a short text', steps: [] },
      ]);
      expect(gateway.calls).to.deep.equal([
        { server: 'tools', tool: 'echo', arguments: { text: finish('the echo said hi') } },
      ]);
      const logged = record.logs.map(({ message, data }) => [message, data?.teammate, data?.step]);
      expect(logged).to.have.deep.members([
        ['plan: 2 tasks', undefined, undefined],
        ['researcher (task 1) step 1: calling tools__echo', 'researcher', 1],
        ['researcher (task 1) step 1: tools__echo returned', 'researcher', 1],
        ['researcher (task 1) finished at step 2', 'researcher', 2],
        ['writer (task 2) finished at step 1', 'writer', 1],
      ]);
      // The researcher's second turn: its tool, its step so far, and the tool's result as the message.
      const second = requests.find((request) => request.system?.includes('Your steps so far'));
      expect(second?.system).to.contain('- tools__echo: Answers its text');
      expect(second?.system).to.contain('1. You called tools__echo with');
      expect(second?.prompt).to.equal(finish('the echo said hi'));
    });

    it("refuses a tool outside the teammate's servers, and any tool to a teammate without servers", async () => {
      for (const [teammate, instruction] of [
        [researcher, call('other__echo', { text: 'x' })],
        [writer, echoThen(finish('x'))],
      ] as const) {
        const { error, requests } = await run({ teammates: [teammate] }, plan([teammate.name, instruction]));
        expect(error).to.include({ code: 'unavailable' });
        expect((error as { details: unknown }).details).to.deep.equal({
          reason: 'llm_output_invalid',
          purpose: `${teammate.name} (task 1), step 1`,
        });
        // The plan, then the step and its one retry, told what was wrong.
        expect(requests).to.have.length(3);
        expect(requests[2]?.system).to.contain('Your previous answer was refused');
      }
      expect(gateway.calls).to.deep.equal([]);
    });

    it('asks once more after an answer that is not JSON, with a note, and carries on', async () => {
      let mangled = false;
      const { outputs, record, requests } = await run(
        { teammates: [writer] },
        plan(['writer', finish('done')]),
        {
          answer: (text) => (mangled ? text : ((mangled = true), `Sure! ${text}`)),
        },
      );
      expect(outputs?.result).to.equal('## 1. writer\n\ndone');
      expect(
        requests.map((request) => request.system?.includes('Your previous answer was refused')),
      ).to.deep.equal([false, true, false]);
      expect(record.logs[0]).to.deep.include({
        message: "the plan: the model's answer was not valid; asking once more",
      });
    });

    it('fails the plan clearly when it names an undeclared teammate or has too many tasks', async () => {
      for (const bad of [
        plan(['stranger', finish('x')]),
        plan(['writer', finish('1')], ['writer', finish('2')], ['writer', finish('3')]),
      ]) {
        const { error } = await run({ teammates: [writer], maxTasks: 2 }, bad);
        expect((error as { details: unknown }).details).to.deep.equal({
          reason: 'llm_output_invalid',
          purpose: 'the plan',
        });
      }
    });

    it('gives a teammate at most maxSteps turns: the last may only finish', async () => {
      const looping = echoThen(echoThen(finish('never')));
      const { error, requests } = await run(
        { teammates: [{ ...researcher, maxSteps: 2 }] },
        plan(['researcher', looping]),
      );
      expect((error as { details: unknown }).details).to.deep.equal({
        reason: 'llm_output_invalid',
        purpose: 'researcher (task 1), step 2',
      });
      expect(gateway.calls).to.have.length(1);
      const last = requests.at(-1);
      expect(last?.system).to.contain('This is your last step');
      expect(JSON.stringify(last?.schema)).not.to.contain('"call"');
    });

    it('runs `concurrency` tasks at once, and no more', async () => {
      let started = 0;
      let inFlight = 0;
      const startedWhenTwoCall: number[] = [];
      const waiting: (() => void)[] = [];
      // A task starts by listing its teammate's tools, and calls one tool before it finishes.
      const listTools: CanvasServicesV2['listTools'] = (servers, signal) => {
        started++;
        return gateway.listTools(servers, signal);
      };
      // Each call waits until two tasks are calling at once: one task at a time would never end.
      const callTool: CanvasServicesV2['callTool'] = async (request, signal) => {
        if (++inFlight >= 2) {
          startedWhenTwoCall.push(started);
          waiting.splice(0).forEach((release) => release());
        } else await new Promise<void>((resolve) => waiting.push(resolve));
        try {
          return await gateway.callTool(request, signal);
        } finally {
          inFlight--;
        }
      };
      const task = (n: number): [string, string] => ['researcher', echoThen(finish(`r${n}`))];
      const { outputs } = await run(
        { teammates: [researcher], concurrency: 2, maxTasks: 4 },
        plan(task(1), task(2), task(3), task(4)),
        { services: { listTools, callTool } },
      );
      // The first time two tasks were mid-way, no third had started.
      expect(startedWhenTwoCall[0]).to.equal(2);
      expect(outputs?.result).to.equal(
        ['r1', 'r2', 'r3', 'r4'].map((r, i) => `## ${i + 1}. researcher\n\n${r}`).join('\n\n'),
      );
    });

    it("stops the other teammates when one fails, and fails with the first teammate's error", async () => {
      let sawAbort = false;
      const callTool: CanvasServicesV2['callTool'] = (_request, signal) =>
        new Promise((_resolve, reject) =>
          signal.addEventListener('abort', () => {
            sawAbort = true;
            reject(signal.reason as Error);
          }),
        );
      const { error } = await run(
        { teammates: [researcher, writer], concurrency: 2 },
        plan(['researcher', echoThen(finish('x'))], ['writer', 'not an action']),
        { services: { callTool } },
      );
      expect((error as { details: unknown }).details).to.deep.equal({
        reason: 'llm_output_invalid',
        purpose: 'writer (task 2), step 1',
      });
      expect(sawAbort).to.equal(true);
    });

    it("rejects with the signal's reason when cancelled mid-run, calling nothing after", async () => {
      const controller = new AbortController();
      const reason = new Error('run cancelled');
      const callTool: CanvasServicesV2['callTool'] = async (request, signal) => {
        const result = await gateway.callTool(request, signal);
        controller.abort(reason);
        return result;
      };
      const { error, requests } = await run(
        { teammates: [researcher] },
        plan(['researcher', echoThen(finish('x'))]),
        {
          services: { callTool },
          signal: controller.signal,
        },
      );
      expect(error).to.equal(reason);
      // The plan and the researcher's first step: no turn after the cancellation.
      expect(requests).to.have.length(2);
    });

    it('merges with one more model turn when merge is llm', async () => {
      const { outputs, requests } = await run(
        { teammates: [writer], merge: 'llm', model: 'sigil-echo-mini' },
        plan(['writer', finish('done')]),
      );
      const merge = requests.at(-1);
      expect(merge?.schema).to.equal(undefined);
      expect(merge?.model).to.equal('sigil-echo-mini');
      expect(merge?.system).to.contain('merge the results');
      expect(outputs?.result).to.equal(
        `The goal: ${plan(['writer', finish('done')])}\n\n## 1. writer\n\ndone`,
      );
    });
  });
});
