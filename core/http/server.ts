import { createServer, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { capConnectionsPerClient } from './client-connections.ts';
import { TrustedProxies } from './trusted-proxies.ts';

/** Bounds on what a client may hold of a server: time to send a request, idle time, connections. */
export interface ServerLimits {
  /** Until all headers arrived (then 408 and the connection closed): slow headers (slowloris). */
  headersTimeoutMs: number;
  /** Until the whole request, body included, arrived: slow bodies. */
  requestTimeoutMs: number;
  /** An idle keep-alive connection's life. */
  keepAliveTimeoutMs: number;
  /** Connections beyond this are closed as they arrive. */
  maxConnections: number;
  /** A client's connections (by address, an IPv6 /64) beyond this are closed as they arrive; 0: no cap. */
  maxConnectionsPerClient: number;
  /** Proxies carrying many clients' connections: not capped per client (`http.trustedProxies`). */
  trustedProxies?: readonly string[];
}

/** The defaults of a service's `http` config (`core/config/service.ts`). */
export const SERVER_LIMITS: Readonly<ServerLimits> = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 1024,
  maxConnectionsPerClient: 128,
};

export interface RunningServer {
  server: Server;
  url: string;
  /** Stops accepting, lets in-flight requests finish (up to `graceMs`), then drops what is left. */
  close(graceMs?: number): Promise<void>;
}

/** Serves `app` (a Koa app, or a service's `HttpApp`) on `host`:`port`, within `limits`. */
export async function listen(
  app: { callback(): RequestListener },
  host: string,
  port: number,
  limits: ServerLimits = SERVER_LIMITS,
): Promise<RunningServer> {
  const server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      // Node looks for requests over their time this often (30 s by default, which would let a
      // slow client keep its connection for up to 30 s past the limit).
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 4))),
    },
    app.callback(),
  );
  server.maxConnections = limits.maxConnections;
  if (limits.maxConnectionsPerClient > 0)
    capConnectionsPerClient(
      server,
      limits.maxConnectionsPerClient,
      new TrustedProxies(limits.trustedProxies ?? []),
    );
  // At shutdown no connection outlives its last answer: responses still being produced are told to
  // close their connection (a stream, whose keep-alive was sent with its headers, has it ended once it
  // finishes), idle ones are closed at once, and so is one that never sent a byte (a client may open
  // one ahead; Node's closeIdleConnections leaves it open until the grace).
  const inFlight = new Set<ServerResponse>();
  const sockets = new Set<Socket>();
  let closing = false;
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('request', (_req, res: ServerResponse) => {
    if (closing) res.shouldKeepAlive = false;
    inFlight.add(res);
    res.once('close', () => inFlight.delete(res));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    server,
    url: `http://${shownHost}:${address.port}`,
    close: (graceMs = 10_000) =>
      new Promise<void>((resolve) => {
        closing = true;
        for (const res of inFlight) {
          if (!res.headersSent) res.shouldKeepAlive = false;
          else {
            // Taken now: the server detaches it from the response as the response finishes.
            const { socket } = res;
            res.once('finish', () => socket?.destroySoon());
          }
        }
        // Not a byte received: no request is lost (idle ones that served one, closeIdleConnections closes).
        for (const socket of sockets) if (socket.bytesRead === 0) socket.destroy();
        const force = setTimeout(() => server.closeAllConnections(), graceMs);
        force.unref();
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      }),
  };
}
