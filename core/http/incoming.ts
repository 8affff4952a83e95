import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { SigilError } from '../errors.ts';

/**
 * A request as the parts that serve it with or without Koa see it (authentication, the MCP lane): its
 * method, URL, headers and body bytes.
 */
export interface IncomingRequest {
  readonly method: string;
  /** Path and query string, as the client sent them. */
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  /** A header's value, '' when absent. */
  header(name: string): string;
  /** The body's bytes, up to the body limit (a 413 beyond it); read once, then kept. */
  rawBody(): Promise<Buffer>;
}

const tooLarge = () => new SigilError('payload_too_large', 'Request body is too large');

/** A header's value as one string ('' when absent), as Koa's `ctx.get` gives it. */
export function headerOf(headers: IncomingHttpHeaders, name: string): string {
  const value = headers[name.toLowerCase()];
  if (value === undefined) return '';
  return Array.isArray(value) ? value.join(', ') : value;
}

/** Reads the body of `req` (nothing when it declares none), refusing more than `limitBytes`. */
export async function readBody(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  const declared = headerOf(req.headers, 'content-length');
  if (headerOf(req.headers, 'transfer-encoding') === '' && (declared === '' || declared === '0'))
    return Buffer.alloc(0);
  if (Number(declared) > limitBytes) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limitBytes) throw tooLarge();
    chunks.push(chunk);
  }
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
}

/** A node:http request as an `IncomingRequest`. */
export function incomingOf(req: IncomingMessage, limitBytes: number): IncomingRequest {
  let body: Promise<Buffer> | undefined;
  return {
    method: req.method ?? 'GET',
    url: req.url ?? '/',
    headers: req.headers,
    header: (name) => headerOf(req.headers, name),
    rawBody: () => (body ??= readBody(req, limitBytes)),
  };
}
