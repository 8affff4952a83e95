import type { LlmToolDefinition } from '@sigil/plugin-api';
import type { Learning, ReflectMemory } from './memory.ts';

/** A tool the runtime answers itself, beside the gateway's: free, and never sent to the gateway. */
export interface RuntimeTool {
  definition: LlmToolDefinition;
  call(input: Record<string, unknown>): Promise<{ content: string; isError: boolean }>;
}

/** What a chat request's model is told of its wallet beyond the conversation, read fresh each request. */
export interface ChatContext {
  /** A system message to put first; absent when there is nothing to tell. */
  system?: string;
  tools: RuntimeTool[];
}

export const LOAD_SKILL_TOOL = 'load_skill';

const words = (text: string) => new Set(text.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) ?? []);

/**
 * The learnings to show: all of them up to `limit`; beyond it the most relevant to the message (words
 * shared with it), then the most confident, then the newest. A wallet's learnings are short and few:
 * word overlap is enough to choose, and costs nothing per request.
 */
export function relevantLearnings(
  learnings: readonly Learning[],
  message: string,
  limit: number,
): Learning[] {
  if (learnings.length <= limit) return [...learnings];
  const said = words(message);
  const overlap = (learning: Learning) => [...words(learning.statement)].filter((w) => said.has(w)).length;
  return learnings
    .map((learning) => ({ learning, score: overlap(learning) }))
    .sort(
      (a, b) =>
        b.score - a.score ||
        b.learning.confidence - a.learning.confidence ||
        b.learning.updatedAt.localeCompare(a.learning.updatedAt),
    )
    .slice(0, limit)
    .map(({ learning }) => learning);
}

/**
 * The wallet's learnings as a system message, and its skills behind a `load_skill` tool: the model
 * sees each skill's name and description and loads the instructions when a task needs them (the
 * SKILL.md way: only what is relevant enters the context).
 */
export async function chatContext(
  memory: ReflectMemory,
  wallet: string,
  message: string,
  maxLearnings: number,
): Promise<ChatContext> {
  const [learnings, skills] = await Promise.all([memory.learnings(wallet), memory.skills(wallet)]);
  const shown = relevantLearnings(learnings, message, maxLearnings);
  const parts: string[] = [];
  if (shown.length > 0)
    parts.push(
      'What you have learned about this user from earlier conversations (follow it unless they say otherwise now):',
      ...shown.map((learning) => `- ${learning.statement}`),
    );
  if (skills.length > 0)
    parts.push(
      `Skills you can load with the ${LOAD_SKILL_TOOL} tool when a task needs one:`,
      ...skills.map((skill) => `- ${skill.name}: ${skill.description}`),
    );
  const tools: RuntimeTool[] =
    skills.length === 0
      ? []
      : [
          {
            definition: {
              name: LOAD_SKILL_TOOL,
              description:
                "Loads one of the user's skills: its step-by-step instructions and the tools it uses",
              inputSchema: {
                type: 'object',
                properties: { name: { type: 'string', enum: skills.map((skill) => skill.name) } },
                required: ['name'],
                additionalProperties: false,
              },
            },
            call: (input) => {
              const skill = skills.find((s) => s.name === input.name);
              return Promise.resolve(
                skill
                  ? {
                      content: `${skill.instructions}\n\nTools: ${skill.tools.join(', ') || 'none'}`,
                      isError: false,
                    }
                  : { content: `No skill ${String(input.name)}`, isError: true },
              );
            },
          },
        ];
  return { ...(parts.length > 0 ? { system: parts.join('\n') } : {}), tools };
}
