import { authPaths } from '../shared/openapi-auth.ts';
import {
  bearer,
  error,
  health,
  json,
  jsonBody,
  metrics,
  openApiDocument,
  parametersOf,
  type ServiceAddress,
} from '../shared/openapi.ts';
import { agentParams, createBody as agentBody } from './agent-routes.ts';
import { attestationPaths } from '../shared/attestation.ts';
import {
  budgetsBody,
  checkBody,
  historyQuery,
  pageQuery,
  withdrawalBody,
  withdrawalParams,
} from './ledger/routes.ts';
import { slotParams, storeBody, unlockBody } from './vault/routes.ts';
import { deleteQuery, eventsQuery, listQuery } from './chat/routes.ts';
import { canvasPaths } from './canvas/openapi.ts';
import { reflectPaths } from './reflect/openapi.ts';

const agent = parametersOf(agentParams, 'path');
const session = [
  ...agent,
  { name: 'sessionId', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } },
];
const spendRefused = {
  ...error,
  description: 'payment_required: a budget, the minimum balance or available',
};
const historyKey = {
  ...error,
  description: 'unavailable: history_key_missing or history_key_mismatch (runtime.history.dataKeys)',
};
const sse = {
  description:
    'Server-Sent Events, each with id = its number in the answer (send it back as Last-Event-ID to GET …/messages/{messageId}/events): context (what self-improvement put in the model context), text-delta, tool-call, tool-result, usage, then cost and done (or error then cost)',
  content: { 'text/event-stream': { schema: { type: 'string' } } },
};

/**
 * OpenAPI 3.1 description of every route of the runtime. Chat bodies are written here by hand: their
 * limits come from the config (`runtime.chat`), so their schemas exist only in a running runtime.
 */
export function runtimeOpenApi(runtime: ServiceAddress): Record<string, unknown> {
  return openApiDocument({
    title: 'Sigil agent runtime',
    description:
      'Wallet sign-in, agents, chat, canvas workflows, self-improvement, the provider-key vault and the wallet ledger.',
    address: runtime,
    bearerDescription: 'A runtime session JWT (1 h) from /auth/verify',
    paths: {
      ...authPaths('/auth', { walletTokens: false }),
      '/openapi.json': {
        get: { summary: 'This document', responses: { '200': json('OpenAPI 3.1 document') } },
      },
      '/.well-known/jwks.json': {
        get: {
          summary: 'Public keys of the delegated gateway JWTs: the current one first, then a replaced one',
          responses: { '200': json('JWKS { keys: [...] }') },
        },
      },
      '/wallet/gateway-token': {
        post: {
          summary: 'Mint a delegated gateway JWT for the signed-in wallet',
          security: bearer,
          responses: {
            '200': json('{ token, tokenType, audience, kid, expiresAt, expiresIn, address }'),
            '401': error,
          },
        },
      },
      ...attestationPaths('jwksSha256', 'jwks'),
      ...canvasPaths(),
      ...reflectPaths(),
      '/wallet/provider-vault/message': {
        get: {
          summary: 'The message a wallet signs to unlock its provider vault',
          responses: { '200': json('{ message, version }') },
        },
      },
      '/wallet/provider-vault': {
        get: {
          summary: 'Vault state only (never key material)',
          security: bearer,
          responses: {
            '200': json('{ persistence, unlocked, unlockedUntil, slots }'),
            '401': error,
          },
        },
      },
      '/wallet/provider-vault/unlock': {
        post: {
          summary: 'Unlock every stored key into this session',
          security: bearer,
          requestBody: jsonBody(unlockBody),
          responses: {
            '200': json('{ unlocked, migrated, unreadable, unlockedUntil }'),
            '400': error,
            '401': error,
            '403': error,
            '409': error,
          },
        },
      },
      '/wallet/provider-vault/lock': {
        post: {
          summary: "End this session's unlock now",
          security: bearer,
          responses: { '204': { description: 'Locked' }, '401': error },
        },
      },
      '/wallet/provider-vault/keys/{slot}': {
        put: {
          summary: "Store (201) or replace (200) the slot's key; needs an unlocked session or the signature",
          security: bearer,
          parameters: parametersOf(slotParams, 'path'),
          requestBody: jsonBody(storeBody),
          responses: {
            '200': json('Slot state'),
            '201': json('Slot state'),
            '400': error,
            '401': error,
            '403': error,
            '409': error,
          },
        },
        delete: {
          summary: "Delete the slot's key",
          security: bearer,
          parameters: parametersOf(slotParams, 'path'),
          responses: { '204': { description: 'Deleted' }, '401': error, '404': error },
        },
      },
      '/agents': {
        post: {
          summary: 'Create an agent of the signed-in wallet',
          security: bearer,
          requestBody: jsonBody(agentBody),
          responses: { '201': json('{ id, wallet, name, model, createdAt }'), '400': error, '401': error },
        },
        get: {
          summary: "The signed-in wallet's agents",
          security: bearer,
          responses: { '200': json('{ agents: [...] }'), '401': error },
        },
      },
      '/agents/{id}': {
        get: {
          summary: 'One agent',
          security: bearer,
          parameters: agent,
          responses: { '200': json('Agent'), '401': error, '404': error },
        },
      },
      '/agents/{id}/budgets': {
        get: {
          summary: "The agent's daily, weekly and monthly budget windows",
          security: bearer,
          parameters: agent,
          responses: {
            '200': json('{ agentId, windows, daily, weekly, monthly }'),
            '401': error,
            '404': error,
          },
        },
        put: {
          summary: 'Set or remove (null) budget limits; omitted ones are kept',
          security: bearer,
          parameters: agent,
          requestBody: jsonBody(budgetsBody),
          responses: { '200': json('The budgets'), '400': error, '401': error, '404': error },
        },
      },
      '/agents/{id}/budget-check': {
        post: {
          summary: 'Would a spend of this amount be allowed now (the check a chat makes)',
          security: bearer,
          parameters: agent,
          requestBody: jsonBody(checkBody, false),
          responses: {
            '200': json('{ allowed: true, amount, available, minimumBalance, budgets }'),
            '400': error,
            '401': error,
            '402': spendRefused,
            '404': error,
          },
        },
      },
      '/agents/{id}/sessions': {
        post: {
          summary: 'Open a chat session',
          security: bearer,
          parameters: agent,
          requestBody: {
            required: false,
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  properties: {
                    servers: { type: 'array', items: { type: 'string' }, description: 'Gateway server ids' },
                    system: {
                      type: 'string',
                      description: 'System prompt (at most runtime.chat.maxInputChars)',
                    },
                  },
                  additionalProperties: false,
                },
              },
            },
          },
          responses: {
            '201': json('Session, with its limits'),
            '400': error,
            '401': error,
            '404': error,
            '409': error,
            '429': error,
          },
        },
        get: {
          summary:
            "The agent's sessions, newest first, open and ended ones (state= to keep one kind), by pages",
          security: bearer,
          parameters: [...agent, ...parametersOf(listQuery, 'query')],
          responses: {
            '200': json(
              '{ sessions: [{ id, agentId, model, provider, servers, messages, state, busy, encrypted, createdAt, lastUsedAt, endedAt, endReason }], nextCursor }',
            ),
            '400': error,
            '401': error,
            '404': error,
          },
        },
      },
      '/agents/{id}/sessions/{sessionId}': {
        get: {
          summary: 'One session, open or ended, with its system prompt',
          security: bearer,
          parameters: session,
          responses: { '200': json('Session, with system'), '401': error, '404': error, '503': historyKey },
        },
        delete: {
          summary:
            'Delete the session and its stored history; with forget=true, also what self-improvement learned only from it (its facets, the learnings and skill versions whose every source is in it; the others lose it from their sources), in the same transaction. Without, what was learned stays. 409 while it answers a message',
          security: bearer,
          parameters: [...session, ...parametersOf(deleteQuery, 'query')],
          responses: {
            '200': json(
              '{ forgotten: { facets, learnings, skills } } (forget=true): what was removed with the session; skills counts skill versions',
            ),
            '204': { description: 'Deleted (without forget=true)' },
            '400': error,
            '401': error,
            '404': error,
            '409': error,
          },
        },
      },
      '/agents/{id}/sessions/{sessionId}/end': {
        post: {
          summary: 'End the session: no more messages, its history stays readable (409 when it has ended)',
          security: bearer,
          parameters: session,
          responses: { '200': json('Session'), '400': error, '401': error, '404': error, '409': error },
        },
      },
      '/agents/{id}/sessions/{sessionId}/messages': {
        get: {
          summary:
            "The session's stored messages in order, by pages (the messages of requests that completed)",
          security: bearer,
          parameters: [...session, ...parametersOf(pageQuery, 'query')],
          responses: {
            '200': json(
              "{ messages: [{ seq, messageId, role, content, toolCalls?, toolCallId?, isError?, cost, createdAt }], nextCursor }; cost: the request's platform cost, on its last message",
            ),
            '400': error,
            '401': error,
            '404': error,
            '500': {
              ...error,
              description: 'internal: history_tampered, a stored message failed its integrity check',
            },
            '503': historyKey,
          },
        },
        post: {
          summary: 'Send one message; the answer streams as Server-Sent Events',
          security: bearer,
          parameters: session,
          requestBody: {
            required: true,
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  required: ['content'],
                  properties: {
                    content: {
                      type: 'string',
                      minLength: 1,
                      description: 'At most runtime.chat.maxInputChars',
                    },
                    id: { type: 'string', pattern: '^[A-Za-z0-9._-]{1,100}$', description: 'Idempotency id' },
                  },
                  additionalProperties: false,
                },
              },
            },
          },
          responses: {
            '200': {
              ...sse,
              headers: {
                'Content-Location': {
                  description: 'Where the stream resumes: GET …/messages/{messageId}/events',
                  schema: { type: 'string' },
                },
              },
            },
            '400': error,
            '401': error,
            '402': spendRefused,
            '404': error,
            '409': error,
            '503': historyKey,
          },
        },
      },
      '/agents/{id}/sessions/{sessionId}/messages/{messageId}/events': {
        get: {
          summary:
            "A message's answer stream again, on any replica: its stored events after Last-Event-ID (or ?after=; neither: from the first), then, while it runs, the new ones until its end; an answer whose replica died ends with an error answer_lost (no id). Kept runtime.chat.streamRetentionSeconds after the answer ended",
          security: bearer,
          parameters: [
            ...session,
            {
              name: 'messageId',
              in: 'path',
              required: true,
              schema: { type: 'string', pattern: '^[A-Za-z0-9._-]{1,100}$' },
            },
            { name: 'Last-Event-ID', in: 'header', required: false, schema: { type: 'integer', minimum: 0 } },
            ...parametersOf(eventsQuery, 'query'),
          ],
          responses: {
            '200': sse,
            '400': error,
            '401': error,
            '404': {
              ...error,
              description: 'not_found: session_not_found, or stream_not_found (none stored, or no longer)',
            },
            '500': {
              ...error,
              description: 'internal: history_tampered, stored events failed their integrity check',
            },
            '503': historyKey,
          },
        },
      },
      '/wallet/balance': {
        get: {
          summary: "The wallet's balance: on chain, unsettled, pending withdrawals, held, available",
          security: bearer,
          responses: { '200': json('Balance'), '401': error },
        },
      },
      '/wallet/deposit-address': {
        get: {
          summary: "The wallet's deposit address",
          security: bearer,
          responses: {
            '200': json('{ wallet, address, token, confirmations, watching }'),
            '401': error,
            '503': error,
          },
        },
      },
      '/wallet/transactions': {
        get: {
          summary: "The wallet's ledger entries, newest first",
          security: bearer,
          parameters: parametersOf(historyQuery, 'query'),
          responses: { '200': json('{ transactions, nextCursor }'), '400': error, '401': error },
        },
      },
      '/wallet/withdrawals': {
        post: {
          summary: 'Withdraw from the deposit address (202 new, 200 the same idempotency key again)',
          security: bearer,
          requestBody: jsonBody(withdrawalBody),
          responses: {
            '200': json('Withdrawal'),
            '202': json('Withdrawal'),
            '400': error,
            '401': error,
            '402': spendRefused,
            '409': error,
            '429': error,
            '503': error,
          },
        },
        get: {
          summary: "The wallet's withdrawals and the limits",
          security: bearer,
          parameters: parametersOf(pageQuery, 'query'),
          responses: { '200': json('{ withdrawals, nextCursor, limits }'), '400': error, '401': error },
        },
      },
      '/wallet/withdrawals/{id}': {
        get: {
          summary: 'One withdrawal',
          security: bearer,
          parameters: parametersOf(withdrawalParams, 'path'),
          responses: { '200': json('Withdrawal'), '401': error, '404': error },
        },
      },
      '/health': health,
      '/metrics': metrics,
    },
  });
}
