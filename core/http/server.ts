import { createServer, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RunningServer {
  server: Server;
  url: string;
  /** Stops accepting, lets in-flight requests finish (up to `graceMs`), then drops what is left. */
  close(graceMs?: number): Promise<void>;
}

/** Serves `app` (a Koa app, or a service's `HttpApp`) on `host`:`port`. */
export async function listen(
  app: { callback(): RequestListener },
  host: string,
  port: number,
): Promise<RunningServer> {
  const server = createServer(app.callback());
  server.keepAliveTimeout = 5_000;
  // Responses still being produced when shutdown begins are told to close their connection, so a
  // keep-alive client does not hold the server open after its last answer.
  const inFlight = new Set<ServerResponse>();
  let closing = false;
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
        for (const res of inFlight) if (!res.headersSent) res.shouldKeepAlive = false;
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
