import { type CanvasNodeV2, definePlugin, extensionPoints, provide } from '@sigil/plugin-api';
import { declaredInputPorts, renderTemplate } from '@sigil/plugin-api/canvas';
import { mapBounded } from './bounded.ts';
import { TEAM_CONFIG, type TeamConfig, teamParams, type TeamParams, type Teammate } from './params.ts';
import { planTasks } from './plan.ts';
import { type TeamScope, turnDefaults } from './structured.ts';
import { type Contribution, runTeammate } from './teammate.ts';

const MERGE_SYSTEM =
  "You merge the results of a team's tasks into one answer to the goal: keep every fact they found, drop repetitions, say where they disagree.";

/** The results one after another, each under its task's number and teammate. */
const sections = (contributions: readonly Contribution[]) =>
  contributions
    .map((contribution, index) => `## ${index + 1}. ${contribution.teammate}\n\n${contribution.result}`)
    .join('\n\n');

async function merged(
  scope: TeamScope,
  params: TeamParams,
  goal: string,
  contributions: Contribution[],
): Promise<string> {
  if (params.merge === 'concat') return sections(contributions);
  const answer = await scope.services.llm(
    {
      ...turnDefaults(scope),
      system: MERGE_SYSTEM,
      prompt: `The goal: ${goal}\n\n${sections(contributions)}`,
    },
    scope.signal,
  );
  const { model, inputTokens, outputTokens } = answer;
  scope.log(
    `merged ${contributions.length} results: ${model}, ${inputTokens} tokens in, ${outputTokens} out`,
    {
      model,
      inputTokens,
      outputTokens,
    },
  );
  return answer.text;
}

function teamNode(config: TeamConfig): CanvasNodeV2<TeamParams> {
  return {
    specVersion: 'v2',
    nodeKind: 'team',
    description:
      'An orchestrator plans sub-tasks with a model and hands them to teammates, model agents with their own gateway tools, then merges their results',
    effect: 'reads',
    teamMode: true,
    params: teamParams(config),
    ports: (params) => ({
      inputs: declaredInputPorts(params.inputs),
      outputs: {
        result: { type: 'string', description: "The teammates' results, merged" },
        plan: {
          type: 'object',
          description: "The orchestrator's plan: { tasks: [{ teammate, instruction }] }",
        },
        contributions: {
          type: 'array',
          description: "Each task's teammate, instruction, result and tool calls, in the plan's order",
        },
      },
    }),
    example: {
      params: {
        inputs: { topic: 'string' },
        goal: 'Write a short briefing on {{ inputs.topic }}.',
        teammates: [
          {
            name: 'researcher',
            instructions: 'You find facts with your tools and report them with where they came from.',
            servers: ['everything'],
            maxSteps: 4,
          },
          { name: 'writer', instructions: 'You write clear, short prose.', maxSteps: 1 },
        ],
        maxTasks: 3,
      },
      inputs: { topic: 'canvas workflows' },
    },
    run: async ({ params, inputs, services, signal, log }) => {
      const scope: TeamScope = { services, signal, log, ...turnDefaults(params) };
      const byName = new Map(params.teammates.map((teammate) => [teammate.name, teammate]));
      try {
        const goal = renderTemplate(params.goal, { inputs });
        const tasks = await planTasks(scope, goal, params.teammates, params.maxTasks);
        log(`plan: ${tasks.length} tasks`, { plan: { tasks } });
        const contributions = await mapBounded(tasks, params.concurrency, signal, (task, index, shared) =>
          // The plan's schema allowed only declared teammates.
          runTeammate(
            { ...scope, signal: shared },
            byName.get(task.teammate) as Teammate,
            task.instruction,
            index + 1,
          ),
        );
        return { result: await merged(scope, params, goal, contributions), plan: { tasks }, contributions };
      } finally {
        // A host that finished a turn after a cancellation: the node still stops with the signal's reason.
        signal.throwIfAborted();
      }
    },
  };
}

/** The `team` canvas node kind (team mode): an orchestrator and its teammates over the host's services. */
export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-team',
  specVersion: 'v2',
  description:
    'Canvas node kind `team` (team mode): an orchestrator plans, teammates with their own tools do, results merged',
  config: TEAM_CONFIG,
  provides: [provide(extensionPoints.canvasNodeKinds, 'team')],
  create: ({ config }) => teamNode(config),
});
