import type { LlmMessage } from '@sigil/plugin-api';
import type { ConversationStore, StoredMessage } from '../chat/history.ts';
import type { ConversationSource, HistoryMessage } from './engine.ts';

const PAGE = 200;

/** A stored chat message as the pipeline reads it; undefined for what it does not read (system). */
function historyMessage(stored: StoredMessage, toolNames: Map<string, string>): HistoryMessage | undefined {
  const message: LlmMessage = stored.message;
  const id = `${stored.messageId}.${stored.seq}`;
  switch (message.role) {
    case 'user':
      return { id, seq: stored.seq, role: 'user', text: message.content };
    case 'assistant':
      for (const call of message.toolCalls ?? []) toolNames.set(call.id, call.name);
      return { id, seq: stored.seq, role: 'assistant', text: message.content };
    case 'tool':
      return {
        id,
        seq: stored.seq,
        role: 'tool',
        text: message.content,
        toolName: toolNames.get(message.toolCallId) ?? 'unknown',
        isError: message.isError === true,
      };
    default:
      return undefined;
  }
}

/** The chat's stored sessions as the pipeline's source: open and ended ones, with their messages. */
export function historySource(history: ConversationStore): ConversationSource {
  return {
    async sessions(wallet) {
      const found: Awaited<ReturnType<ConversationSource['sessions']>> = [];
      let after: string | undefined;
      for (;;) {
        const page = await history.pending(wallet, { after, limit: PAGE, includeOpen: true });
        for (const session of page.sessions)
          found.push({
            id: session.id,
            agentId: session.agentId,
            model: session.model,
            lastSeq: session.lastSeq,
          });
        if (!page.more) return found;
        after = page.sessions.at(-1)?.watermark;
      }
    },
    async messages(wallet, sessionId, afterSeq) {
      const out: HistoryMessage[] = [];
      const toolNames = new Map<string, string>();
      let from = afterSeq;
      for (;;) {
        const page = await history.messages(wallet, sessionId, { afterSeq: from, limit: PAGE });
        for (const stored of page.messages) {
          const message = historyMessage(stored, toolNames);
          if (message) out.push(message);
          from = stored.seq;
        }
        if (!page.more) return out;
      }
    },
  };
}
