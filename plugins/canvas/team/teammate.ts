import { z } from 'zod';
import type { CanvasToolInfoV2 } from '@sigil/plugin-api';
import type { Teammate } from './params.ts';
import { askStructured, type TeamScope } from './structured.ts';

/** One tool call of a teammate, as contributions record it. */
export interface TeammateStep {
  step: number;
  tool: string;
  arguments: Record<string, unknown>;
  isError: boolean;
  /** The start of the tool's text (the model saw as much). */
  text: string;
}

export interface Contribution {
  teammate: string;
  instruction: string;
  result: string;
  steps: TeammateStep[];
}

/** How much of a tool's text a teammate sees and its steps keep; of a tool's input schema, its prompt shows. */
const TOOL_TEXT_CHARS = 4000;
const INPUT_SCHEMA_CHARS = 2000;

const FINISH = z.object({ action: z.literal('finish'), result: z.string() }).strict();

type TeammateAction =
  { action: 'call'; tool: string; arguments: Record<string, unknown> } | { action: 'finish'; result: string };

/** What a step may answer: a call of one of `tools` (by qualified name), or the result. */
function actionSchema(tools: readonly string[]): z.ZodType<TeammateAction> {
  if (tools.length === 0) return FINISH;
  const call = z
    .object({
      action: z.literal('call'),
      tool: z.enum(tools as [string, ...string[]]),
      arguments: z.record(z.string(), z.unknown()),
    })
    .strict();
  return z.discriminatedUnion('action', [call, FINISH]);
}

/** A tool as the teammate names it: unique across its servers, like the gateway's `server__tool`. */
const qualified = (tool: CanvasToolInfoV2) => `${tool.server}__${tool.name}`;

/**
 * A teammate's task: an agent loop of at most `maxSteps` model turns, each a call of one of the
 * teammate's own tools (those of its servers) or its result; the last turn may only finish. Each turn
 * is structured output (`services.llm` has no native tool calling); each call and result is logged.
 */
export async function runTeammate(
  scope: TeamScope,
  teammate: Teammate,
  instruction: string,
  task: number,
): Promise<Contribution> {
  const listed =
    teammate.servers.length > 0 ? await scope.services.listTools(teammate.servers, scope.signal) : [];
  const tools = new Map(
    listed.filter((tool) => teammate.servers.includes(tool.server)).map((tool) => [qualified(tool), tool]),
  );
  const who = `${teammate.name} (task ${task})`;
  const steps: TeammateStep[] = [];
  const turns = { ...scope, ...(teammate.model !== undefined ? { model: teammate.model } : {}) };
  for (let step = 1; ; step++) {
    const last = step === teammate.maxSteps;
    const action = await askStructured(turns, {
      system: stepSystem(teammate, instruction, [...tools.values()], steps, last),
      prompt: step === 1 ? instruction : observation(steps.at(-1) as TeammateStep),
      schema: actionSchema(last ? [] : [...tools.keys()]),
      purpose: `${who}, step ${step}`,
    });
    if (action.action === 'finish') {
      scope.log(`${who} finished at step ${step}`, { teammate: teammate.name, task, step, action: 'finish' });
      return { teammate: teammate.name, instruction, result: action.result, steps };
    }
    // The schema allowed only the names of `tools`.
    const tool = tools.get(action.tool) as CanvasToolInfoV2;
    const logged = { teammate: teammate.name, task, step, action: 'call', tool: action.tool };
    scope.log(`${who} step ${step}: calling ${action.tool}`, { ...logged, arguments: action.arguments });
    const result = await scope.services.callTool(
      { server: tool.server, tool: tool.name, arguments: action.arguments },
      scope.signal,
    );
    const text = result.text.slice(0, TOOL_TEXT_CHARS);
    steps.push({ step, tool: action.tool, arguments: action.arguments, isError: result.isError, text });
    scope.log(`${who} step ${step}: ${action.tool} ${result.isError ? 'failed' : 'returned'}`, {
      ...logged,
      isError: result.isError,
      text,
    });
  }
}

/** The latest call's result: the user message of the turn after it. */
const observation = (step: TeammateStep) => (step.text === '' ? '(the tool returned no text)' : step.text);

function stepSystem(
  teammate: Teammate,
  instruction: string,
  tools: readonly CanvasToolInfoV2[],
  steps: readonly TeammateStep[],
  last: boolean,
): string {
  const toolLines = tools.map(
    (tool) =>
      `- ${qualified(tool)}: ${tool.description ?? ''}\n  arguments (JSON Schema): ${JSON.stringify(tool.inputSchema).slice(0, INPUT_SCHEMA_CHARS)}`,
  );
  const stepLines = steps.map((step, index) => {
    const call = `${step.step}. You called ${step.tool} with ${JSON.stringify(step.arguments)}`;
    const outcome = step.isError ? 'it failed' : 'it returned';
    return index === steps.length - 1
      ? `${call}; ${outcome}: see the user message.`
      : `${call}; ${outcome}: ${step.text}`;
  });
  return [
    teammate.instructions,
    '',
    `You are ${teammate.name}, a member of a team, working on one task step by step (${teammate.maxSteps} steps at most).`,
    'At each step answer with JSON only: {"action":"call","tool":"<tool>","arguments":{...}} to call one of your tools (its result comes next), or {"action":"finish","result":"<your result>"} when you are done.',
    '',
    ...(tools.length > 0 ? ['Your tools:', ...toolLines] : ['You have no tools.']),
    '',
    `Your task: ${instruction}`,
    ...(stepLines.length > 0 ? ['', 'Your steps so far:', ...stepLines] : []),
    ...(last ? ['', 'This is your last step: finish with your result.'] : []),
  ].join('\n');
}
