import { PROTECTED_RESOURCE_PATH } from '../../core/auth/challenge.ts';
import { attestationPaths } from '../shared/attestation.ts';
import { authPaths } from '../shared/openapi-auth.ts';
import {
  bearer,
  error,
  health,
  json,
  jsonBody,
  metrics,
  openApiDocument,
  optionalBearer,
  parametersOf,
  type ServiceAddress,
} from '../shared/openapi.ts';
import { paidResultParams } from './payments/routes.ts';
import { callBody, serverParams, toolParams } from './rest.ts';
import {
  body as secretsBody,
  deleteQuery as secretsDeleteQuery,
  params as secretsParams,
} from './secrets/routes.ts';
import { verifyBody } from './verify.ts';

/** x402 v2 over HTTP: the payment in, the terms of a 402 and the receipt out, each base64 JSON. */
const paymentSignature = {
  name: 'PAYMENT-SIGNATURE',
  in: 'header',
  required: false,
  description: 'x402 v2 PaymentPayload (base64 JSON), when payments are enabled',
  schema: { type: 'string' },
};
const paid = (description: string, schema?: Record<string, unknown>) => ({
  ...json(description, schema),
  headers: {
    'PAYMENT-RESPONSE': { description: 'x402 v2 SettleResponse (base64 JSON)', schema: { type: 'string' } },
  },
});
const retryLater = (description: string) => ({
  ...error,
  description,
  headers: { 'Retry-After': { description: 'Seconds to wait before retrying', schema: { type: 'integer' } } },
});
const paymentRequired = {
  ...error,
  description: 'Payment required: the terms in PAYMENT-REQUIRED (x402 v2 PaymentRequired, base64 JSON)',
  headers: { 'PAYMENT-REQUIRED': { schema: { type: 'string' } } },
};

const serverId = parametersOf(serverParams, 'path');
const tool = parametersOf(toolParams, 'path');
const mcpSession = {
  name: 'X-MCP-Session',
  in: 'header',
  schema: { type: 'string', maxLength: 128 },
  description: 'Names the enabled-server set of an authenticated wallet (`default` when absent)',
};
const refused = { summary: 'Not supported (stateless): 405 with Allow: POST', responses: { '405': error } };
const protectedResource = {
  get: {
    summary: 'OAuth protected-resource metadata (RFC 9728), with how to make a wallet token',
    responses: { '200': json('{ resource, resource_name, bearer_methods_supported, wallet_tokens, … }') },
  },
};

/** OpenAPI 3.1 description of every route of the gateway, served at /api/openapi.json. */
export function gatewayOpenApi(gateway: ServiceAddress): Record<string, unknown> {
  return openApiDocument({
    title: 'Sigil tool gateway',
    description: 'Stateless MCP endpoint and REST API over the same catalog and execution path.',
    address: gateway,
    bearerDescription: 'A session JWT (24 h), a wallet token (prefix sigil_wt_) or a delegated runtime JWT',
    schemas: {
      CallToolResult: {
        type: 'object',
        description: 'An MCP CallToolResult: content[], isError?, structuredContent?, _meta?',
      },
    },
    paths: {
      '/mcp': {
        post: {
          summary:
            'MCP JSON-RPC 2.0 (Streamable HTTP, stateless), per request at 2026-07-28 (server/discover, tools/list, tools/call; the envelope in params._meta) or 2025-11-25 (initialize, notifications/initialized, ping, logging/setLevel, tools/list, tools/call): docs/mcp-revisions.md',
          parameters: [mcpSession],
          security: optionalBearer,
          responses: {
            '200': json('JSON-RPC response'),
            '202': { description: 'Notification accepted' },
            '400': json(
              'JSON-RPC parse error, invalid request, or a request the 2026-07-28 validation ladder refuses (-32602 envelope, -32020 header mismatch, -32022 unsupported revision)',
            ),
            '404': json('JSON-RPC -32601: a method MCP 2026-07-28 does not have here (initialize, ping, …)'),
          },
        },
        get: refused,
        delete: refused,
      },
      '/mcp/server/{serverId}': {
        post: {
          summary: "MCP JSON-RPC exposing only one server's tools (un-namespaced)",
          parameters: parametersOf(secretsParams, 'path'),
          security: optionalBearer,
          responses: {
            '200': json('JSON-RPC response'),
            '202': { description: 'Notification accepted' },
            '400': json('As POST /mcp'),
            '403': error,
            '404': json('No such server (an error), or JSON-RPC -32601 as POST /mcp'),
            '503': error,
          },
        },
        get: refused,
        delete: refused,
      },
      '/api/servers': {
        get: {
          summary: 'List catalog servers with filter verdict, runnability and tier',
          responses: { '200': json('{ servers: [...] }') },
        },
      },
      '/api/servers/{id}': {
        get: {
          summary: 'Server details',
          parameters: serverId,
          responses: { '200': json('Server details'), '404': error },
        },
      },
      '/api/servers/{id}/tools': {
        get: {
          summary: 'Served tools (and quarantined ones, with reasons)',
          parameters: serverId,
          responses: { '200': json('{ tools, quarantinedTools }'), '403': error, '404': error, '503': error },
        },
      },
      '/api/servers/{id}/tools/{name}': {
        post: {
          summary: 'Call a tool (x402 payment required once payments are enabled)',
          parameters: [...tool, paymentSignature],
          security: optionalBearer,
          requestBody: jsonBody(callBody, false),
          responses: {
            '200': paid('CallToolResult', { $ref: '#/components/schemas/CallToolResult' }),
            '400': error,
            '402': paymentRequired,
            '403': error,
            '404': error,
            '413': error,
            '429': retryLater('rate_limited: the caller has its limit of tool calls in flight'),
            '503': retryLater('unavailable: every MCP server process is busy, and the wait for one ran out'),
          },
        },
      },
      '/api/servers/{id}/tools/{name}/approve': {
        post: {
          summary: "Approve a quarantined tool's changed definition (operator wallets only)",
          parameters: tool,
          security: bearer,
          responses: { '200': json('Server details'), '401': error, '403': error, '404': error },
        },
      },
      '/api/verify': {
        post: {
          summary: 'Verify an execution proof (x402 payment required once payments are enabled)',
          parameters: [paymentSignature],
          requestBody: jsonBody(verifyBody),
          responses: {
            '200': paid('{ valid: true, … }'),
            '400': error,
            '402': paymentRequired,
            '422': error,
          },
        },
      },
      '/api/secrets/{serverId}': {
        post: {
          summary: "Store the caller's secrets for one server (only names its catalog entry declares)",
          parameters: parametersOf(secretsParams, 'path'),
          security: bearer,
          requestBody: jsonBody(secretsBody),
          responses: {
            '200': json('{ serverId, names, declared, missing, persistence }'),
            '400': error,
            '401': error,
            '404': error,
          },
        },
        get: {
          summary: "The names (never the values) of the caller's secrets for one server",
          parameters: parametersOf(secretsParams, 'path'),
          security: bearer,
          responses: {
            '200': json('{ serverId, names, declared, missing, persistence }'),
            '401': error,
            '404': error,
          },
        },
        delete: {
          summary: "Delete the caller's secrets for one server, or one of them (?name=)",
          parameters: [...parametersOf(secretsParams, 'path'), ...parametersOf(secretsDeleteQuery, 'query')],
          security: bearer,
          responses: {
            '200': json('{ serverId, names, declared, missing, persistence }'),
            '401': error,
            '404': error,
          },
        },
      },
      '/api/payments/config': {
        get: {
          summary: 'Payment terms: network, chain id, token, price per call, payTo, scheme (free)',
          responses: {
            '200': json('{ enabled, network, chainId, token, pricePerCall, priceUsd, payTo, scheme, … }'),
          },
        },
      },
      '/api/payments/reconciliation': {
        get: {
          summary: 'Settlement records compared with the chain (operator wallets only)',
          security: bearer,
          responses: { '200': json('{ checked, onChain, mismatches }'), '403': error, '404': error },
        },
      },
      '/api/payments/{paymentId}/result': {
        get: {
          summary: "A paid call's result, fetched again by its payer once the payment settled",
          parameters: parametersOf(paidResultParams, 'path'),
          security: bearer,
          responses: {
            '200': json('{ paymentId, result, receipt }'),
            '401': error,
            '404': error,
            '409': error,
          },
        },
      },
      '/api/warmup/status': {
        get: {
          summary: 'Package cache and verification status; has a summary field',
          responses: { '200': json('{ summary, servers, caches }') },
        },
      },
      '/api/warmup/refresh': {
        post: {
          summary: 'Re-verify the catalog now (operator wallets only)',
          security: bearer,
          responses: { '202': json('{ started }'), '403': error },
        },
      },
      '/api/openapi.json': {
        get: { summary: 'This document', responses: { '200': json('OpenAPI 3.1 document') } },
      },
      ...authPaths('/api/auth', { walletTokens: true }),
      [PROTECTED_RESOURCE_PATH]: protectedResource,
      [`${PROTECTED_RESOURCE_PATH}/mcp`]: protectedResource,
      ...attestationPaths('proofKeyFingerprint', 'proofKeyFingerprint'),
      '/health': health,
      '/metrics': metrics,
    },
  });
}
