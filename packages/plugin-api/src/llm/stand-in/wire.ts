import type { ServerResponse } from 'node:http';

/** What the stand-in's two wire formats share: how a chat request reaches them and how they fail. */

/** What a wire format needs from the server to answer one chat request. */
export interface Exchange {
  res: ServerResponse;
  body: unknown;
  /** Aborts when the client goes away. */
  closed: AbortSignal;
  /** A number unique to this request in this server, for ids. */
  serial: number;
  /** Refuses unknown models and answers the failing ones; true when the request may go on. */
  admitModel(model: string): boolean;
  /** Writes SSE frames, pacing them for `sigil-slow`, until done or the client went away. */
  stream(model: string, frames: readonly string[]): Promise<void>;
  /** Writes one JSON response. */
  json(status: number, value: unknown, headers?: Record<string, string>): void;
}

/** Failures as both wires classify them; each wire names them its own way. */
export type FailureKind = 'auth' | 'invalid' | 'not_found' | 'too_large' | 'rate_limit' | 'server';

export interface Wire {
  chatPath: string;
  /** Writes an error in the wire's shape. */
  fail(res: ServerResponse, kind: FailureKind, message: string, headers?: Record<string, string>): void;
  handle(exchange: Exchange): Promise<void>;
  models(): unknown;
}

const STATUS: Record<FailureKind, number> = {
  auth: 401,
  invalid: 400,
  not_found: 404,
  too_large: 413,
  rate_limit: 429,
  server: 500,
};
export const statusOf = (kind: FailureKind): number => STATUS[kind];

export function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  const body = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...headers,
  });
  res.end(body);
}
