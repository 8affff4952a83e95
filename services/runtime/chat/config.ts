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
  })
  .strict()
  .prefault({});
