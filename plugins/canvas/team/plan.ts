import { z } from 'zod';
import type { Teammate } from './params.ts';
import { askStructured, type TeamScope } from './structured.ts';

export interface PlannedTask {
  teammate: string;
  instruction: string;
}

/** How much of a teammate's instructions the orchestrator sees. */
const INSTRUCTIONS_SHOWN = 1000;

/** The orchestrator's turn: the goal split into at most `maxTasks` tasks, each for a declared teammate. */
export async function planTasks(
  scope: TeamScope,
  goal: string,
  teammates: readonly Teammate[],
  maxTasks: number,
): Promise<PlannedTask[]> {
  const names = teammates.map((teammate) => teammate.name) as [string, ...string[]];
  const schema = z
    .object({
      tasks: z
        .array(z.object({ teammate: z.enum(names), instruction: z.string().min(1).max(20_000) }).strict())
        .min(1)
        .max(maxTasks),
    })
    .strict();
  const roster = teammates.map(
    (teammate) =>
      `- ${teammate.name} (${teammate.servers.length > 0 ? `tools of ${teammate.servers.join(', ')}` : 'no tools'}): ${teammate.instructions.slice(0, INSTRUCTIONS_SHOWN)}`,
  );
  const system = [
    `You are the orchestrator of a team. Split the goal in the user message into at most ${maxTasks} tasks, and give each to the teammate best suited to it.`,
    'Each instruction must stand on its own: a teammate sees only its instruction, not the goal or the other tasks, which run independently of it.',
    'Answer with JSON only: {"tasks":[{"teammate":"<name>","instruction":"<what to do>"}]}.',
    '',
    'Teammates:',
    ...roster,
  ].join('\n');
  const plan = await askStructured(scope, { system, prompt: goal, schema, purpose: 'the plan' });
  return plan.tasks;
}
