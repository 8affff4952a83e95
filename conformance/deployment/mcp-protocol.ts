import { z } from 'zod';
import { ensure, expectShape, pass } from '@sigil/plugin-api/kit';
import type { Requirement } from './context.ts';
import { expectStatus } from './expect.ts';
import {
  expectJsonRpcError,
  expectMethodNotAllowed,
  expectResult,
  freshSessionId,
  initializeRequest,
  KNOWN_PROTOCOL_VERSIONS,
  McpConnection,
  postMcp,
  REQUESTED_PROTOCOL_VERSION,
  toolNames,
  toolNamesSchema,
} from './mcp.ts';

/**
 * The MCP endpoint as a protocol (gateway spec parts 4 and 7): stateless Streamable HTTP, the
 * handshake, and the standard JSON-RPC 2.0 errors for what is not a valid request.
 */

const MCP = '/mcp';
const SPEC_MCP_ENDPOINTS = 'gateway spec part 4, MCP endpoints';
const SPEC_JSONRPC_ERRORS =
  'gateway spec part 7: "Unknown methods or malformed JSON-RPC payloads: standard JSON-RPC errors"; JSON-RPC 2.0 section 5.1';

const initializeResult = z.object({
  protocolVersion: z.string(),
  capabilities: z.object({ tools: z.record(z.string(), z.unknown()) }).loose(),
  serverInfo: z.object({ name: z.string().min(1), version: z.string().min(1) }).loose(),
});

export const mcpProtocolRequirements: readonly Requirement[] = [
  {
    id: 'GW-4.mcp-405',
    level: 'MUST',
    title: 'GET and DELETE /mcp answer 405 with Allow: POST (the endpoint is stateless)',
    spec: `${SPEC_MCP_ENDPOINTS}: "GET, DELETE /mcp return 405 (stateless)"; part 7; RFC 9110 section 15.5.6 (Allow)`,
    service: 'gateway',
    check: async (context) => {
      // A positive control first: the same path must answer POST, or a 405 proves nothing.
      const initialize = await postMcp(context, MCP, initializeRequest(1));
      expectResult(initialize, `initialize at POST ${MCP}`);
      for (const method of ['GET', 'DELETE'] as const) {
        await expectMethodNotAllowed(
          context,
          method,
          MCP,
          { accept: 'text/event-stream' },
          `${method} ${MCP}`,
        );
      }
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-initialize',
    level: 'MUST',
    title: 'initialize completes the MCP handshake with a protocol version the client speaks',
    spec: `${SPEC_MCP_ENDPOINTS}, JSON-RPC method initialize (handshake); MCP lifecycle, version negotiation`,
    service: 'gateway',
    check: async (context) => {
      const reply = await postMcp(context, MCP, initializeRequest(1));
      const result = expectShape(
        initializeResult,
        expectResult(reply, `initialize (protocolVersion ${REQUESTED_PROTOCOL_VERSION})`),
        'the initialize result',
      );
      ensure(
        (KNOWN_PROTOCOL_VERSIONS as readonly string[]).includes(result.protocolVersion),
        `initialize with ${REQUESTED_PROTOCOL_VERSION} answered protocolVersion ${result.protocolVersion}, not a published MCP revision`,
      );
      // A version the server cannot speak: it must answer with one it does speak, never echo it back.
      const unknown = '1999-01-01';
      const counter = expectShape(
        initializeResult,
        expectResult(
          await postMcp(context, MCP, initializeRequest(2, unknown)),
          `initialize (protocolVersion ${unknown})`,
        ),
        'the initialize result',
      );
      ensure(
        (KNOWN_PROTOCOL_VERSIONS as readonly string[]).includes(counter.protocolVersion),
        `initialize with the unknown version ${unknown} answered protocolVersion ${counter.protocolVersion}, expected a version the gateway supports`,
      );
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-2025-stateless',
    level: 'MUST',
    title:
      'At 2025-11-25 a request needs no handshake and no protocol session: tools/list answers without initialize, and with an Mcp-Session-Id never issued',
    spec: `gateway spec part 1: "a stateless MCP endpoint"; part 2, Session: "state tied to wallet auth, not to MCP protocol sessions"; part 4: "405 (stateless)"; MCP 2025-11-25, Streamable HTTP, session management (a session is the server's choice; a server that has none holds no request to one)`,
    service: 'gateway',
    check: async (context) => {
      // The positive control: the same request after the handshake, as a stateful client sends it.
      const connection = await McpConnection.open(context, MCP);
      const handshaken = toolNames(await connection.listTools());
      const version = String(connection.initialized?.protocolVersion);
      const cases: [string, Record<string, string>][] = [
        [`tools/list with MCP-Protocol-Version ${version} and no initialize before it`, {}],
        [
          'tools/list with an Mcp-Session-Id the gateway never issued',
          { 'mcp-session-id': freshSessionId() },
        ],
      ];
      for (const [what, headers] of cases) {
        const reply = await postMcp(
          context,
          MCP,
          { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
          { 'mcp-protocol-version': version, ...headers },
        );
        const listed = toolNames(
          expectShape(toolNamesSchema, expectResult(reply, what), `${what}: the result`).tools,
        );
        ensure(
          listed === handshaken,
          `${what} lists [${listed}], but the same request after initialize lists [${handshaken}]`,
        );
      }
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-initialized-notification',
    level: 'MUST',
    title: 'notifications/initialized is accepted with 202 and no body',
    spec: `${SPEC_MCP_ENDPOINTS}, JSON-RPC method notifications/initialized; part 6; MCP Streamable HTTP (a notification gets 202 Accepted)`,
    service: 'gateway',
    check: async (context) => {
      const reply = await postMcp(context, MCP, initializeRequest(1));
      const result = expectResult(reply, `initialize at POST ${MCP}`);
      const session = reply.response.headers.get('mcp-session-id');
      const notified = await postMcp(
        context,
        MCP,
        { jsonrpc: '2.0', method: 'notifications/initialized' },
        {
          'mcp-protocol-version': String(result.protocolVersion),
          ...(session === null ? {} : { 'mcp-session-id': session }),
        },
      );
      expectStatus(notified.response, 202, 'notifications/initialized');
      ensure(
        notified.response.text.trim() === '',
        'notifications/initialized answered 202 with a body; a notification gets none',
      );
      return pass();
    },
  },
  {
    id: 'GW-7.jsonrpc-parse-error',
    level: 'MUST',
    title: 'A body that is not JSON gets JSON-RPC error -32700 (Parse error) with id null, not a 5xx',
    spec: SPEC_JSONRPC_ERRORS,
    service: 'gateway',
    check: async (context) => {
      const reply = await postMcp(context, MCP, '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"');
      const error = expectJsonRpcError(reply, -32700, 'truncated JSON');
      ensure(error.id === null, `the parse error carries id ${JSON.stringify(error.id)}, expected null`);
      return pass();
    },
  },
  {
    id: 'GW-7.jsonrpc-invalid-request',
    level: 'MUST',
    title: 'JSON that is not a JSON-RPC 2.0 request gets JSON-RPC error -32600 (Invalid Request), not a 5xx',
    spec: SPEC_JSONRPC_ERRORS,
    service: 'gateway',
    check: async (context) => {
      const cases: [string, Record<string, unknown> | string][] = [
        ['a method that is not a string', { jsonrpc: '2.0', id: 7, method: 42 }],
        ['no "jsonrpc": "2.0" member', { id: 8, method: 'tools/list' }],
        ['a JSON string instead of an object', '"tools/list"'],
      ];
      for (const [what, message] of cases) {
        const error = expectJsonRpcError(await postMcp(context, MCP, message), -32600, what);
        const sentId = typeof message === 'string' ? null : message.id;
        ensure(
          error.id === null || error.id === sentId,
          `${what}: the error carries id ${JSON.stringify(error.id)}, expected null or ${JSON.stringify(sentId)}`,
        );
      }
      return pass();
    },
  },
  {
    id: 'GW-7.jsonrpc-method-not-found',
    level: 'MUST',
    title: 'An unknown method gets JSON-RPC error -32601 (Method not found) with the request id',
    spec: SPEC_JSONRPC_ERRORS,
    service: 'gateway',
    check: async (context) => {
      const connection = await McpConnection.open(context, MCP);
      const reply = await connection.send('sigil-conformance/no-such-method', {});
      const error = expectJsonRpcError(reply, -32601, 'the method sigil-conformance/no-such-method');
      ensure(
        error.id === reply.id,
        `the -32601 error carries id ${JSON.stringify(error.id)}, not the request's ${JSON.stringify(reply.id)}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-7.jsonrpc-invalid-params',
    level: 'MUST',
    title: 'A known method with invalid params gets JSON-RPC error -32602 (Invalid params)',
    spec: SPEC_JSONRPC_ERRORS,
    service: 'gateway',
    check: async (context) => {
      const connection = await McpConnection.open(context, MCP);
      expectJsonRpcError(
        await connection.send('tools/call', { arguments: {} }),
        -32602,
        'tools/call without a tool name',
      );
      expectJsonRpcError(
        await connection.send('tools/call', { name: 42, arguments: {} }),
        -32602,
        'tools/call with a number as the tool name',
      );
      return pass();
    },
  },
];
