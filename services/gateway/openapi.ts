import type { Kernel } from '../kernel.ts';
import { SIGIL_VERSION } from '../shared/health.ts';

const json = (description: string, schema: Record<string, unknown> = { type: 'object' }) => ({
  description,
  content: { 'application/json': { schema } },
});
const error = json('Error: { code, message, hint? }', { $ref: '#/components/schemas/Error' });
const serverId = {
  name: 'id',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^[a-z0-9][a-z0-9-]{0,62}$' },
};
const bearer = [{ bearer: [] }, {}];
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

/** OpenAPI 3.1 description of the gateway's HTTP surface, served at /api/openapi.json. */
export function gatewayOpenApi(kernel: Kernel): Record<string, unknown> {
  const { publicUrl, host, port } = kernel.config.gateway;
  return {
    openapi: '3.1.0',
    info: {
      title: 'Sigil tool gateway',
      version: SIGIL_VERSION,
      description: 'Stateless MCP endpoint and REST API over the same catalog and execution path.',
    },
    servers: [{ url: publicUrl ?? `http://${host}:${port}` }],
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description: 'A session JWT (24 h) or a wallet token (prefix sigil_wt_)',
        },
      },
      schemas: {
        Error: {
          type: 'object',
          required: ['code', 'message'],
          properties: { code: { type: 'string' }, message: { type: 'string' }, hint: { type: 'string' } },
        },
        CallToolResult: {
          type: 'object',
          description: 'An MCP CallToolResult: content[], isError?, structuredContent?, _meta?',
        },
      },
    },
    paths: {
      '/mcp': {
        post: {
          summary:
            'MCP JSON-RPC 2.0 (Streamable HTTP, stateless): initialize, tools/list, tools/call, notifications/initialized',
          parameters: [
            {
              name: 'X-MCP-Session',
              in: 'header',
              schema: { type: 'string', maxLength: 128 },
              description: 'Enabled-server set of an authenticated wallet',
            },
          ],
          security: bearer,
          responses: {
            '200': json('JSON-RPC response'),
            '202': { description: 'Notification accepted' },
            '400': json('JSON-RPC parse error or invalid request'),
          },
        },
        get: { summary: 'Not supported (stateless)', responses: { '405': error } },
        delete: { summary: 'Not supported (stateless)', responses: { '405': error } },
      },
      '/mcp/server/{serverId}': {
        post: {
          summary: "MCP JSON-RPC exposing only one server's tools (un-namespaced)",
          parameters: [{ ...serverId, name: 'serverId' }],
          security: bearer,
          responses: { '200': json('JSON-RPC response'), '403': error, '404': error, '503': error },
        },
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
          parameters: [serverId],
          responses: { '200': json('Server details'), '404': error },
        },
      },
      '/api/servers/{id}/tools': {
        get: {
          summary: 'Served tools (and quarantined ones, with reasons)',
          parameters: [serverId],
          responses: { '200': json('{ tools, quarantinedTools }'), '403': error, '404': error, '503': error },
        },
      },
      '/api/servers/{id}/tools/{name}': {
        post: {
          summary: 'Call a tool (x402 payment required once payments are enabled)',
          parameters: [
            serverId,
            { name: 'name', in: 'path', required: true, schema: { type: 'string' } },
            paymentSignature,
          ],
          security: bearer,
          requestBody: {
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  properties: { arguments: { type: 'object' } },
                  additionalProperties: false,
                },
              },
            },
          },
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
      '/api/verify': {
        post: {
          summary: 'Verify an execution proof (x402 payment required once payments are enabled)',
          parameters: [paymentSignature],
          requestBody: { content: { 'application/json': { schema: { type: 'object' } } } },
          responses: {
            '200': paid('{ valid: true, … }'),
            '400': error,
            '402': paymentRequired,
            '422': error,
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
          responses: { '200': json('{ checked, onChain, mismatches }'), '403': error },
        },
      },
      '/api/servers/{id}/tools/{name}/approve': {
        post: {
          summary: "Approve a quarantined tool's changed definition (operator wallets only)",
          parameters: [serverId, { name: 'name', in: 'path', required: true, schema: { type: 'string' } }],
          security: [{ bearer: [] }],
          responses: { '200': json('Server details'), '401': error, '403': error, '404': error },
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
      '/api/auth/challenge': {
        get: {
          summary: 'SIWE challenge',
          parameters: [{ name: 'address', in: 'query', required: true, schema: { type: 'string' } }],
          responses: { '200': json('{ nonce, message, … }') },
        },
      },
      '/api/auth/verify': {
        post: {
          summary: 'Verify a signed SIWE message; returns a 24 h ES256 JWT',
          responses: { '200': json('{ token, expiresAt, … }'), '401': error },
        },
      },
      '/api/auth/create-token': {
        post: {
          summary: 'Create a long-lived wallet token (prefix sigil_wt_)',
          security: [{ bearer: [] }],
          responses: { '201': json('{ token, id, … }'), '401': error },
        },
      },
      '/health': { get: { summary: 'Gateway health', responses: { '200': json('{ status, … }') } } },
    },
  };
}
