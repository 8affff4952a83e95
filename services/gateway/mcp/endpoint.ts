import Router from '@koa/router';
import type { Context } from 'koa';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import type { LaneAnswer, LaneExchange, LaneRoute } from '../../../core/http/lane.ts';
import type { ResolvedServer } from '../servers.ts';
import type { McpDispatcher, McpRequestScope } from './dispatcher.ts';
import { McpAnswer } from './event-stream.ts';
import { classify, ErrorCode, errorReply, type JsonRpcReply } from './jsonrpc.ts';
import { classifyRevision, isRejection } from './revision.ts';

const SESSION_HEADER = 'x-mcp-session';
const SESSION_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export interface McpEndpointOptions {
  dispatcher: McpDispatcher;
  /**
   * Decides whether a per-server endpoint's server may run (exists, runnable, allowed, verified) before
   * any request is accepted; the request's calls use the server it resolves instead of asking again.
   */
  admit(serverId: string): Promise<ResolvedServer>;
}

/**
 * Streamable HTTP, stateless, at MCP 2026-07-28 and 2025-11-25 (and older) side by side, told apart per
 * request (revision.ts): every POST carries one JSON-RPC message and gets one answer, JSON or (for
 * a client that accepts it, when there is something to say before the result) an SSE stream of this
 * request's notifications ending with its response (see McpAnswer). The POSTs are the gateway's lane
 * (served without Koa: every tool call comes this way); GET (a server-initiated stream) and DELETE
 * (ending a protocol session) make no sense without protocol sessions, so the app's router answers
 * them 405.
 */
export function mcpRoutes(options: McpEndpointOptions): { lane: LaneRoute[]; router: Router } {
  const router = new Router();
  const refuse = (ctx: Context) => {
    ctx.set('Allow', 'POST');
    throw new SigilError('method_not_allowed', 'This MCP endpoint is stateless: use POST', {
      hint: 'Send JSON-RPC requests with POST',
    });
  };
  router.get('/mcp', refuse).delete('/mcp', refuse);
  router.get('/mcp/server/:serverId', refuse).delete('/mcp/server/:serverId', refuse);
  const lane: LaneRoute[] = [
    { method: 'POST', path: '/mcp', handle: (exchange) => handle(exchange, options, undefined) },
    {
      method: 'POST',
      path: '/mcp/server/:serverId',
      handle: async (exchange) =>
        handle(exchange, options, await options.admit(exchange.params.serverId as string)),
    },
  ];
  return { lane, router };
}

async function handle(
  exchange: LaneExchange,
  options: McpEndpointOptions,
  server: ResolvedServer | undefined,
): Promise<LaneAnswer> {
  const { request, state } = exchange;
  if (state.authError) throw state.authError;
  let body: unknown;
  try {
    body = JSON.parse((await request.rawBody()).toString('utf8'));
  } catch (err) {
    if (isSigilError(err)) throw err;
    return reply(
      400,
      errorReply(null, { code: ErrorCode.ParseError, message: 'Parse error: the body is not valid JSON' }),
    );
  }
  const message = classify(body);
  if (message.kind === 'invalid') return reply(400, message.reply);
  // Per request, from the body; Mcp-Session-Id means nothing here on either revision.
  const revision = classifyRevision(
    {
      headerVersion: request.header('mcp-protocol-version'),
      mcpMethod: request.header('mcp-method'),
      mcpName: request.header('mcp-name'),
      message: message.message,
    },
    message.kind,
  );
  if (isRejection(revision)) {
    const id = message.kind === 'request' ? message.message.id : null;
    return reply(revision.reject.status, errorReply(id, revision.reject.error));
  }
  if (message.kind === 'notification') return { status: 202, body: null };
  const session = request.header(SESSION_HEADER);
  if (session !== '' && !SESSION_ID.test(session)) {
    return reply(
      400,
      errorReply(message.message.id, {
        code: ErrorCode.InvalidRequest,
        message: 'Invalid X-MCP-Session: 1-128 of A-Z a-z 0-9 . _ : -',
      }),
    );
  }
  const answer = new McpAnswer(exchange);
  const scope: McpRequestScope = {
    wallet: state.auth?.address,
    sessionId: session === '' ? undefined : session,
    server,
    revision,
    disconnection: exchange.disconnection(),
    meta: undefined,
    origin: request,
    notify: answer.notify,
  };
  try {
    const { status, reply } = await options.dispatcher.dispatch(message.message, scope);
    return answer.finish(status, reply);
  } catch (err) {
    if (!answer.streaming) throw err; // the lane maps it to its HTTP answer
    // The stream's status is sent: the failure can only be this request's JSON-RPC error.
    exchange.log.error({ err }, 'MCP request failed after its event stream started');
    return answer.finish(
      200,
      errorReply(message.message.id, { code: ErrorCode.InternalError, message: 'Internal error' }),
    );
  }
}

const reply = (status: number, body: JsonRpcReply): LaneAnswer => ({ status, body: JSON.stringify(body) });
