import type { LlmMessage, LlmToolDefinition } from '@sigil/plugin-api';

/** A tool the runtime answers itself, beside the gateway's: free, and never sent to the gateway. */
export interface RuntimeTool {
  definition: LlmToolDefinition;
  call(input: Record<string, unknown>): Promise<{ content: string; isError: boolean }>;
}

/**
 * What a chat request's model is told of its wallet beyond the conversation (self-improvement's
 * learnings and skills), read fresh for each request and never stored in the conversation.
 */
export interface ChatContext {
  /** Text for the system message; absent when there is nothing to tell. */
  system?: string;
  tools: RuntimeTool[];
  /** What the context holds, told to the client as the `context` event (absent: the event is not sent). */
  used?: Record<string, unknown>;
}

/** The context of a wallet's chat request, given the user's message. */
export type ChatContextSource = (wallet: string, message: string) => Promise<ChatContext>;

export const NO_CONTEXT: ChatContext = { tools: [] };

/**
 * The conversation as the model gets it: `context.system` joined to the conversation's own system
 * prompt (one system message, which every provider's wire takes), or put first when it has none.
 */
export function withContext(messages: readonly LlmMessage[], context: ChatContext): LlmMessage[] {
  if (context.system === undefined) return [...messages];
  const [first, ...rest] = messages;
  return first?.role === 'system'
    ? [{ role: 'system', content: `${first.content}\n\n${context.system}` }, ...rest]
    : [{ role: 'system', content: context.system }, ...messages];
}
