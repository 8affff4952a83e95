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

/**
 * Reads the body of `req` (nothing when it declares none), refusing more than `limitBytes`: a declared
 * length at once, a chunked body when it grows past the limit (then the rest is left unread, for the
 * server to drop, and the 413 can still be answered). Listens for chunks rather than iterating the
 * stream: an async iterator per request is a measurable share of a busy gateway's CPU.
 */
export function readBody(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  const declared = headerOf(req.headers, 'content-length');
  if (headerOf(req.headers, 'transfer-encoding') === '' && (declared === '' || declared === '0'))
    return Promise.resolve(Buffer.alloc(0));
  if (Number(declared) > limitBytes) return Promise.reject(tooLarge());
  if (req.readableEnded) return Promise.resolve(Buffer.alloc(0)); // read by someone before
  // Anonymous listeners, left on the request when it ends: named closures per request cost a
  // defineProperty each under tsx (esbuild's keepNames).
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    req.on('data', (chunk: Buffer) => {
      if (settled) return;
      size += chunk.length;
      if (size <= limitBytes) {
        chunks.push(chunk);
        return;
      }
      settled = true;
      req.pause();
      reject(tooLarge());
    });
    req.once('end', () => {
      if (settled) return;
      settled = true;
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
    });
    req.once('error', (error: Error) => {
      if (settled) return;
      settled = true;
      reject(error);
    });
    req.once('close', () => {
      if (settled) return;
      settled = true;
      reject(new Error('the client closed the connection before the body ended'));
    });
  });
}

/** A node:http request as an `IncomingRequest` (a class: one per request, no closures). */
class NodeIncomingRequest implements IncomingRequest {
  private body: Promise<Buffer> | undefined;

  constructor(
    private readonly req: IncomingMessage,
    private readonly limitBytes: number,
  ) {}

  get method(): string {
    return this.req.method ?? 'GET';
  }

  get url(): string {
    return this.req.url ?? '/';
  }

  get headers(): IncomingHttpHeaders {
    return this.req.headers;
  }

  header(name: string): string {
    return headerOf(this.req.headers, name);
  }

  rawBody(): Promise<Buffer> {
    return (this.body ??= readBody(this.req, this.limitBytes));
  }
}

export const incomingOf = (req: IncomingMessage, limitBytes: number): IncomingRequest =>
  new NodeIncomingRequest(req, limitBytes);
