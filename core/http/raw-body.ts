import type { Context } from 'koa';
import { SigilError } from '../errors.ts';

const tooLarge = () => new SigilError('payload_too_large', 'Request body is too large');

/**
 * The request body as bytes, for checks over exactly what was sent (ERC-8128 content digests). The body
 * parser keeps the text of the JSON it parsed; any other body (another content type, a DELETE) is still
 * unread and is read here, up to `limitBytes`, and left in `ctx.request.rawBody` for later readers.
 */
export async function readRawBody(ctx: Context, limitBytes: number): Promise<Buffer> {
  const parsed = ctx.request.rawBody as string | undefined;
  if (parsed !== undefined) return Buffer.from(parsed, 'utf8');
  const declared = ctx.get('content-length');
  if (!ctx.get('transfer-encoding') && (declared === '' || declared === '0')) return Buffer.alloc(0);
  if (Number(declared) > limitBytes) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limitBytes) throw tooLarge();
    chunks.push(chunk);
  }
  const body = Buffer.concat(chunks);
  ctx.request.rawBody = body.toString('utf8');
  return body;
}
