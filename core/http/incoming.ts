import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { SigilError } from '@sigil/plugin-api';
import type { TrustedProxies } from './trusted-proxies.ts';

/**
 * A request as the parts that serve it with or without Koa see it (authentication, the MCP lane): its
 * method, URL, headers and body bytes.
 */
export interface IncomingRequest {
  readonly method: string;
  /** Path and query string, as the client sent them. */
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  /**
   * The client's address: the connection's remote address ('' once the socket is gone), or, from a
   * trusted proxy (`http.trustedProxies`), the client its X-Forwarded-For names.
   */
  readonly clientAddress: string;
  /** A header's value, '' when absent. */
  header(name: string): string;
  /** The body's bytes, up to the body limit (a 413 beyond it); read once, then kept. */
  rawBody(): Promise<Buffer>;
}

/** A request target's path, without its query. */
export function pathOf(url: string): string {
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
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
  return new Promise((resolve, reject) => new BodyRead(req, limitBytes, resolve, reject));
}

/**
 * One body being read. A class rather than closures: under tsx each named closure per request costs a
 * defineProperty (esbuild's keepNames). Its listeners stay on the request, which ends with it.
 */
class BodyRead {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private settled = false;

  constructor(
    private readonly req: IncomingMessage,
    private readonly limitBytes: number,
    private readonly resolve: (body: Buffer) => void,
    private readonly reject: (error: Error) => void,
  ) {
    req.on('data', (chunk: Buffer) => this.take(chunk));
    req.once('end', () => this.end(undefined));
    req.once('error', (error: Error) => this.end(error));
    req.once('close', () => this.closed());
  }

  /**
   * A request closes after every body, read or not: only an unread one is an error, made only then (an
   * Error's stack costs microseconds, and every request closes).
   */
  private closed(): void {
    if (!this.settled) this.end(new Error('the client closed the connection before the body ended'));
  }

  private take(chunk: Buffer): void {
    if (this.settled) return;
    this.size += chunk.length;
    if (this.size <= this.limitBytes) this.chunks.push(chunk);
    else {
      this.req.pause();
      this.end(tooLarge());
    }
  }

  /** The first of the end, an error, the close or the limit decides. */
  private end(error: Error | undefined): void {
    if (this.settled) return;
    this.settled = true;
    if (error) this.reject(error);
    else this.resolve(this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks));
  }
}

/** A node:http request as an `IncomingRequest` (a class: one per request, no closures). */
class NodeIncomingRequest implements IncomingRequest {
  private body: Promise<Buffer> | undefined;

  constructor(
    private readonly req: IncomingMessage,
    private readonly limitBytes: number,
    private readonly proxies: TrustedProxies,
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

  get clientAddress(): string {
    return this.proxies.clientAddress(
      this.req.socket.remoteAddress ?? '',
      headerOf(this.req.headers, 'x-forwarded-for'),
    );
  }

  header(name: string): string {
    return headerOf(this.req.headers, name);
  }

  rawBody(): Promise<Buffer> {
    return (this.body ??= readBody(this.req, this.limitBytes));
  }
}

export const incomingOf = (
  req: IncomingMessage,
  limitBytes: number,
  proxies: TrustedProxies,
): IncomingRequest => new NodeIncomingRequest(req, limitBytes, proxies);
