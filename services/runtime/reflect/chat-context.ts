import type { Clock } from '../../../core/clock.ts';
import type { ChatContext, ChatContextSource, RuntimeTool } from '../chat/context.ts';
import { NO_CONTEXT } from '../chat/context.ts';
import { type Learning, ReflectMemory, type Skill } from './memory.ts';
import type { WalletSettingsDocument } from './settings.ts';
import { WalletCache } from './wallet-cache.ts';

/** What a chat's context is drawn from: the wallet's active learnings and its skills' latest versions. */
export interface WalletMemory {
  learnings: Learning[];
  skills: Skill[];
}

async function readMemory(memory: ReflectMemory, wallet: string): Promise<WalletMemory> {
  const [learnings, skills] = await Promise.all([memory.learnings(wallet), memory.skills(wallet)]);
  return { learnings, skills };
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
 * SKILL.md way: only what is relevant enters the context). `used` names both for the client.
 */
export async function chatContext(
  memory: ReflectMemory | WalletMemory,
  wallet: string,
  message: string,
  maxLearnings: number,
): Promise<ChatContext> {
  const { learnings, skills } = memory instanceof ReflectMemory ? await readMemory(memory, wallet) : memory;
  const shown = relevantLearnings(learnings, message, maxLearnings);
  if (shown.length === 0 && skills.length === 0) return NO_CONTEXT;
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
  return {
    system: parts.join('\n'),
    tools: skills.length === 0 ? [] : [loadSkillTool(skills)],
    used: {
      learnings: shown.map(({ id, statement }) => ({ id, statement })),
      skills: skills.map(({ name, version }) => ({ name, version })),
    },
  };
}

function loadSkillTool(skills: readonly Skill[]): RuntimeTool {
  return {
    definition: {
      name: LOAD_SKILL_TOOL,
      description: "Loads one of the user's skills: its step-by-step instructions and the tools it uses",
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
          ? { content: `${skill.instructions}\n\nTools: ${skill.tools.join(', ') || 'none'}`, isError: false }
          : { content: `No skill ${String(input.name)}`, isError: true },
      );
    },
  };
}

/**
 * Chats' context from self-improvement's memory, for wallets whose settings let chats use it. The
 * memory is read at most once every `cacheMs` a wallet (wallet-cache.ts): what this process changes
 * in it shows at the next message, what another replica changes within `cacheMs`.
 */
export function reflectChatContext(parts: {
  memory: ReflectMemory;
  settingsOf: (wallet: string) => Promise<WalletSettingsDocument>;
  maxLearnings: number;
  clock: Clock;
  cacheMs: number;
}): ChatContextSource {
  const cache = new WalletCache<WalletMemory>(parts.clock, parts.cacheMs);
  parts.memory.onChange((wallet) => cache.invalidate(wallet));
  return async (wallet, message) => {
    const { selfImprovement } = await parts.settingsOf(wallet);
    if (!selfImprovement.useInChats) return NO_CONTEXT;
    const memory = await cache.get(wallet, () => readMemory(parts.memory, wallet));
    return chatContext(memory, wallet, message, parts.maxLearnings);
  };
}
