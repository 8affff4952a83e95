import Router from '@koa/router';
import type { Context } from 'koa';
import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import { SigilError } from '../../../core/errors.ts';
import { disconnectSignal } from '../../../core/http/disconnect.ts';
import { readRawBody } from '../../../core/http/raw-body.ts';
import type { McpDispatcher, McpRequestScope } from './dispatcher.ts';
import { classify, ErrorCode, errorReply, type JsonRpcReply } from './jsonrpc.ts';

const SESSION_HEADER = 'x-mcp-session';
const SESSION_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export interface McpEndpointOptions {
  dispatcher: McpDispatcher;
  bodyLimitBytes: number;
  /** Checks a per-server endpoint before any request is accepted (exists, allowed, runnable). */
  assertServerServable(serverId: string): Promise<void>;
}

/**
 * Streamable HTTP, stateless: every POST carries one JSON-RPC message and gets one JSON answer.
 * GET (a server-initiated stream) and DELETE (ending a protocol session) make no sense without
 * protocol sessions, so they are 405.
 */
export function mcpRouter(options: McpEndpointOptions): Router {
  const router = new Router();
  const refuse = (ctx: Context) => {
    ctx.set('Allow', 'POST');
    throw new SigilError('method_not_allowed', 'This MCP endpoint is stateless: use POST', {
      hint: 'Send JSON-RPC requests with POST',
    });
  };
  router.get('/mcp', refuse).delete('/mcp', refuse);
  router.get('/mcp/server/:serverId', refuse).delete('/mcp/server/:serverId', refuse);
  router.post('/mcp', (ctx) => handle(ctx, options, undefined));
  router.post('/mcp/server/:serverId', async (ctx) => {
    const serverId = ctx.params.serverId as string;
    await options.assertServerServable(serverId);
    await handle(ctx, options, serverId);
  });
  return router;
}

/** Paths whose bodies this endpoint reads itself, so malformed JSON gets a JSON-RPC parse error. */
export const MCP_PATHS = /^\/mcp(\/|$)/;

async function handle(
  ctx: Context,
  options: McpEndpointOptions,
  serverId: string | undefined,
): Promise<void> {
  const authError = ctx.state.authError as SigilError | undefined;
  if (authError) throw authError;
  const protocolVersion = ctx.get('mcp-protocol-version');
  if (protocolVersion !== '' && !SUPPORTED_PROTOCOL_VERSIONS.includes(protocolVersion)) {
    return reply(
      ctx,
      400,
      errorReply(null, {
        code: ErrorCode.InvalidRequest,
        message: `Unsupported MCP-Protocol-Version: ${protocolVersion}`,
      }),
    );
  }
  let body: unknown;
  try {
    body = JSON.parse((await readRawBody(ctx, options.bodyLimitBytes)).toString('utf8'));
  } catch (err) {
    if (err instanceof SigilError) throw err;
    return reply(
      ctx,
      400,
      errorReply(null, { code: ErrorCode.ParseError, message: 'Parse error: the body is not valid JSON' }),
    );
  }
  const message = classify(body);
  if (message.kind === 'invalid') return reply(ctx, 400, message.reply);
  if (message.kind === 'notification') {
    // Null first: Koa turns a null body into 204, unless a status is set afterwards.
    ctx.body = null;
    ctx.status = 202;
    return;
  }
  const session = ctx.get(SESSION_HEADER);
  if (session !== '' && !SESSION_ID.test(session)) {
    return reply(
      ctx,
      400,
      errorReply(message.message.id, {
        code: ErrorCode.InvalidRequest,
        message: 'Invalid X-MCP-Session: 1-128 of A-Z a-z 0-9 . _ : -',
      }),
    );
  }
  const scope: McpRequestScope = {
    wallet: (ctx.state.auth as AuthPrincipal | undefined)?.address,
    sessionId: session === '' ? undefined : session,
    serverId,
    signal: disconnectSignal(ctx),
    meta: undefined,
  };
  reply(ctx, 200, await options.dispatcher.dispatch(message.message, scope));
}

function reply(ctx: Context, status: number, body: JsonRpcReply): void {
  ctx.status = status;
  ctx.type = 'application/json';
  ctx.body = JSON.stringify(body);
}
