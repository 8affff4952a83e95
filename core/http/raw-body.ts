import type { Context } from 'koa';
import { headerOf, readBody, type IncomingRequest } from './incoming.ts';

/**
 * The request body as bytes, for checks over exactly what was sent (ERC-8128 content digests). The body
 * parser keeps the text of the JSON it parsed; any other body (another content type, a DELETE) is still
 * unread and is read here, up to `limitBytes`, and left in `ctx.request.rawBody` for later readers.
 */
export async function readRawBody(ctx: Context, limitBytes: number): Promise<Buffer> {
  const parsed = ctx.request.rawBody as string | undefined;
  if (parsed !== undefined) return Buffer.from(parsed, 'utf8');
  const body = await readBody(ctx.req, limitBytes);
  ctx.request.rawBody = body.toString('utf8');
  return body;
}

/**
 * A Koa request as an `IncomingRequest`, its body read as `readRawBody` reads it; its client is
 * `ctx.ip`, which the service's app sets from its trusted proxies.
 */
export function incomingOfContext(ctx: Context, limitBytes: number): IncomingRequest {
  return {
    method: ctx.method,
    url: ctx.originalUrl,
    headers: ctx.req.headers,
    clientAddress: ctx.ip,
    header: (name) => headerOf(ctx.req.headers, name),
    rawBody: () => readRawBody(ctx, limitBytes),
  };
}
