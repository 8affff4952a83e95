import { BaseError, http, webSocket, type Transport } from 'viem';

/**
 * The RPC transport for a URL: a WebSocket for ws(s):// (one long-lived connection; each request costs
 * about a quarter of the CPU of an HTTP one through fetch, and a paid call makes a dozen), else HTTP.
 */
export function rpcTransport(url: string): Transport {
  return /^wss?:/.test(url) ? webSocket(url) : http(url);
}

/** Whether viem's error `err` (or anything it wraps) is of `type`. */
export const causedBy = (err: unknown, type: new (...args: never[]) => Error): boolean =>
  err instanceof BaseError && err.walk((cause) => cause instanceof type) !== null;
