import { z } from 'zod';
import { type CanvasNodeContextV2, type CanvasServicesV2, isSigilError, SigilError } from '@sigil/plugin-api';

/** What a team's model turns and tool calls need from the node's context, and the turns' defaults. */
export interface TeamScope {
  services: CanvasServicesV2;
  /** The node's signal, or a teammate's (aborted too when another teammate fails). */
  signal: AbortSignal;
  log: CanvasNodeContextV2['log'];
  model?: string;
  maxOutputTokens?: number;
}

/** The model and token cap of turns, those `scope` sets (none undefined: the host's defaults apply). */
export const turnDefaults = (
  scope: Pick<TeamScope, 'model' | 'maxOutputTokens'>,
): Pick<TeamScope, 'model' | 'maxOutputTokens'> => ({
  ...(scope.model !== undefined ? { model: scope.model } : {}),
  ...(scope.maxOutputTokens !== undefined ? { maxOutputTokens: scope.maxOutputTokens } : {}),
});

export interface StructuredTurn<T> {
  system: string;
  prompt: string;
  schema: z.ZodType<T>;
  /** Names the turn in logs and errors: `the plan`, `researcher, step 2`. */
  purpose: string;
}

/** The reason of the host's `llm` rejection, and of this module's, for an answer not valid against its schema. */
export const INVALID_ANSWER = 'llm_output_invalid';

const PROBLEM_CHARS = 1000;

/**
 * A JSON answer valid against `turn.schema` (sent to the host as JSON Schema, and checked here again).
 * Models get it wrong at times: an answer that is not JSON or not valid (or that the host refused as
 * such) is asked for once more, with a note saying what was wrong; a second one fails `unavailable`.
 */
export async function askStructured<T>(scope: TeamScope, turn: StructuredTurn<T>): Promise<T> {
  // Draft 7: what JSON Schema validators (the host's Ajv) and model APIs take most widely.
  const schema = z.toJSONSchema(turn.schema, { target: 'draft-7' }) as Record<string, unknown>;
  let problem: string | undefined;
  for (let attempt = 1; ; attempt++) {
    scope.signal.throwIfAborted();
    const answer = await answerOf(scope, {
      ...turnDefaults(scope),
      system: problem === undefined ? turn.system : `${turn.system}\n\n${retryNote(problem)}`,
      prompt: turn.prompt,
      schema,
    });
    // A host that answered after a cancellation: nothing more starts.
    scope.signal.throwIfAborted();
    if ('json' in answer) {
      const checked = turn.schema.safeParse(answer.json);
      if (checked.success) return checked.data;
      problem = z.prettifyError(checked.error);
    } else problem = answer.problem;
    if (attempt === 2)
      throw new SigilError(
        'unavailable',
        `${turn.purpose}: the model answered invalid JSON twice: ${problem}`,
        {
          hint: 'Try a model that supports structured output, or simpler instructions',
          details: { reason: INVALID_ANSWER, purpose: turn.purpose },
        },
      );
    scope.log(`${turn.purpose}: the model's answer was not valid; asking once more`, {
      purpose: turn.purpose,
      problem,
    });
  }
}

/** The host's answer as JSON, or what was wrong with it. */
async function answerOf(
  scope: TeamScope,
  request: Parameters<CanvasServicesV2['llm']>[0],
): Promise<{ json: unknown } | { problem: string }> {
  let answer;
  try {
    answer = await scope.services.llm(request, scope.signal);
  } catch (err) {
    scope.signal.throwIfAborted();
    if (isSigilError(err) && err.details?.reason === INVALID_ANSWER)
      return { problem: err.message.slice(0, PROBLEM_CHARS) };
    throw err;
  }
  if (answer.json !== undefined) return { json: answer.json };
  try {
    return { json: JSON.parse(answer.text) };
  } catch {
    return { problem: 'the answer is not JSON' };
  }
}

const retryNote = (problem: string) =>
  `Your previous answer was refused: ${problem.slice(0, PROBLEM_CHARS)}\nAnswer again with JSON only, valid against the schema.`;
