import { z } from 'zod';

/** The runtime's `chat` settings: chat sessions and their limits (docs/runtime-chat.md). */
export const chatSchema = z
  .object({
    internalKey: z
      .boolean()
      .default(false)
      .describe(
        'Let wallets without a key of their own chat on runtime.providerApiKey (priced 1.15 × baseLlmCost instead of 0.10 ×)',
      ),
    gatewayPath: z
      .enum(['delegated', 'operator'])
      .default('delegated')
      .describe(
        "How the tool loop reaches the gateway: the wallet's delegated ES256 JWT, or the operator wallet's ERC-8128 signatures",
      ),
    gatewayUrl: z
      .url()
      .optional()
      .describe(
        'Where the tool loop reaches the gateway, when not at gateway.publicUrl (sigil up sets it to its own gateway)',
      ),
    maxSessionsPerAgent: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(20)
      .describe('Open chat sessions one agent may have'),
    maxMessagesPerSession: z
      .number()
      .int()
      .min(1)
      .max(10_000)
      .default(100)
      .describe('User messages answered in one session'),
    maxInputChars: z
      .number()
      .int()
      .min(1)
      .max(1_000_000)
      .default(32_000)
      .describe("Characters of one message (and of a session's system prompt)"),
    maxSteps: z
      .number()
      .int()
      .min(1)
      .max(50)
      .default(8)
      .describe('Model turns per message; then the message ends with finishReason "max-steps"'),
    maxToolCallsPerTurn: z
      .number()
      .int()
      .min(0)
      .max(100)
      .default(16)
      .describe('Tool calls the loop runs from one model turn; more end the message with an error'),
    maxServersPerSession: z
      .number()
      .int()
      .min(0)
      .max(50)
      .default(8)
      .describe('Gateway servers one session may enable'),
    maxOutputTokens: z
      .number()
      .int()
      .min(1)
      .max(1_000_000)
      .default(4096)
      .describe('Output tokens of one model turn (and of the cost estimate held before it)'),
    sessionIdleSeconds: z
      .number()
      .int()
      .min(60)
      .max(7 * 86_400)
      .default(3600)
      .describe('A session idle this long ends'),
    toolClientIdleSeconds: z
      .number()
      .int()
      .min(10)
      .max(7 * 86_400)
      .default(600)
      .describe(
        "A chat session's MCP client of the gateway is closed after this long unused; its next message connects again",
      ),
    maxToolClients: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .default(1000)
      .describe(
        'MCP clients of the gateway kept open across chat sessions (one a session); beyond it the least recently used is closed',
      ),
    resumeGraceSeconds: z
      .number()
      .int()
      .min(0)
      .max(600)
      .default(15)
      .describe(
        "An answer whose client's stream was cut goes on this long for a client to resume it (GET …/messages/:messageId/events, on any replica), and as long as one follows it; then it stops, charged what it used. 0: it stops when its client goes",
      ),
    streamRetentionSeconds: z
      .number()
      .int()
      .min(60)
      .max(7 * 86_400)
      .default(600)
      .describe(
        "An answer's stored stream events (what a resumed stream replays) are deleted this long after it ended; its answer stays in the session's history",
      ),
  })
  .strict()
  .prefault({});

/** A key-encryption key of the chat history: an id stored beside what it wrapped, and 32 bytes. */
const dataKeySchema = z
  .object({
    id: z
      .string({ error: 'a key needs an id (RUNTIME_DATA_KEY=<id>:<base64 key>)' })
      .regex(/^[A-Za-z0-9._-]{1,64}$/, '1 to 64 characters of A-Z a-z 0-9 . _ -')
      .describe('Stored beside each data key it wraps: name a key by it, never reuse it for another'),
    key: z
      .string()
      .regex(/^[A-Za-z0-9+/]{43}=$/, 'must be 32 bytes in base64 (openssl rand -base64 32)')
      .describe('32 random bytes, base64'),
  })
  .strict();

/** The runtime's `history` settings: chat history at rest (docs/runtime-chat.md, "History"). */
export const historySchema = z
  .object({
    dataKeys: z
      .array(dataKeySchema)
      .max(16)
      .default([])
      .refine((keys) => new Set(keys.map((k) => k.id)).size === keys.length, 'key ids must differ')
      .describe(
        "[{ id, key: 32 bytes base64 }] wrapping each chat session's and each wallet's self-improvement memory's data key: the first wraps new ones, the others open older ones (sigil db rewrap-history). Env: <id>:<key>,… Empty: plain text",
      ),
  })
  .strict()
  .prefault({});

/** RUNTIME_DATA_KEY: `<id>:<base64 key>`, several comma-separated (the current first). */
export const asDataKeys = (raw: string): unknown =>
  raw.split(',').map((item) => {
    const colon = item.indexOf(':');
    // Without an id the schema says one is needed, naming the item.
    return colon < 0
      ? { key: item.trim() }
      : { id: item.slice(0, colon).trim(), key: item.slice(colon + 1).trim() };
  });
