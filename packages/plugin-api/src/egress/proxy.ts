import { chmodSync } from 'node:fs';
import { connect, createServer, isIP, type Server, type Socket } from 'node:net';
import type { EgressAddresses } from './addresses.ts';

/**
 * The only way out of a sandbox with an allow-list: an HTTP proxy in the runtime's own process,
 * listening on a unix socket that is bound into the sandbox (the sandbox has a network namespace of
 * its own, with nothing but loopback). It relays `CONNECT host:port` tunnels and absolute-form plain
 * HTTP requests to allow-listed `host:port` pairs and answers 403 to everything else. It resolves
 * names itself, so the sandbox needs no DNS.
 *
 * Every connection costs this process descriptors (the sandbox's end and the upstream), so a sandbox
 * may hold only `maxConnections` at once (503 beyond), must send its request head and have the
 * upstream answer within `headerTimeoutMs` (408 or 504), and loses a tunnel idle for `idleTimeoutMs`.
 */

/** A request head longer than this is refused: no legitimate proxy request needs more. */
const MAX_HEAD_BYTES = 16 * 1024;

export interface EgressTarget {
  host: string;
  port: number;
}

/** `host:port` or `[v6]:port` to its parts; undefined when it is neither. */
export function parseHostPort(value: string): EgressTarget | undefined {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:/[\]@]+)):(\d{1,5})$/.exec(value.trim());
  if (!match) return undefined;
  const port = Number(match[3]);
  if (port < 1 || port > 65535) return undefined;
  return { host: (match[1] ?? match[2] ?? '').toLowerCase(), port };
}

export interface EgressLimits {
  /** Connections the sandbox may hold open at once; more are answered 503 and closed. */
  maxConnections: number;
  /** From accept until the tunnel is up: the request head read and the upstream connected. */
  headerTimeoutMs: number;
  /** A tunnel with no byte either way for this long is closed. */
  idleTimeoutMs: number;
}

export interface EgressProxyOptions extends EgressLimits {
  socketPath: string;
  allowList: readonly string[];
  /** Where allowed names may lead (resolved once, special ranges only when listed). */
  addresses: EgressAddresses;
  /** Told about every refused destination (for the operator's log). */
  onDenied?: (target: string) => void;
}

/** How `route` tells `accept` where a connection stands, for its timers. */
interface Tunnel {
  connecting(): void;
  established(): void;
}

export class EgressProxy {
  private readonly allowed: ReadonlySet<string>;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  /** Connections from the sandbox now open. */
  private clients = 0;

  constructor(private readonly options: EgressProxyOptions) {
    this.allowed = new Set(
      options.allowList.map((entry) => {
        const target = parseHostPort(entry);
        // Never met: the spec schema (spec.ts) refuses such an entry first.
        if (!target) throw new Error(`network allow-list entry "${entry}" is not host:port`);
        return key(target);
      }),
    );
    this.server = createServer((socket) => this.accept(socket));
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.socketPath, () => resolve());
    });
    // The sandbox runs as another user; connecting to a unix socket needs write permission on it.
    chmodSync(this.options.socketPath, 0o666);
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    this.track(client);
    if (this.clients >= this.options.maxConnections) {
      this.options.onDenied?.(
        `connection ${this.clients + 1} (at most ${this.options.maxConnections} at once)`,
      );
      return refuse(client, 503, `at most ${this.options.maxConnections} connections at once`);
    }
    this.clients++;
    client.once('close', () => this.clients--);
    // Absolute, not an inactivity timer: a head trickled a byte at a time must not hold a slot forever.
    let waitingFor: 'request head' | 'upstream' = 'request head';
    const deadline = setTimeout(() => {
      const status = waitingFor === 'upstream' ? 504 : 408;
      refuse(client, status, `no ${waitingFor} within ${this.options.headerTimeoutMs} ms`);
    }, this.options.headerTimeoutMs);
    client.once('close', () => clearTimeout(deadline));
    const tunnel: Tunnel = {
      connecting: () => (waitingFor = 'upstream'),
      established: () => {
        clearTimeout(deadline);
        // Writes to the client count as activity too, so its idle timer covers both directions.
        client.setTimeout(this.options.idleTimeoutMs, () => client.destroy());
      },
    };
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end === -1) {
        if (head.length > MAX_HEAD_BYTES) refuse(client, 431, 'request head too large');
        return;
      }
      client.off('data', onData);
      client.pause();
      this.route(client, head.subarray(0, end + 4), head.subarray(end + 4), tunnel);
    };
    client.on('data', onData);
  }

  private route(client: Socket, head: Buffer, rest: Buffer, tunnel: Tunnel): void {
    const lines = head.toString('latin1').split('\r\n');
    const [method = '', target = '', version = 'HTTP/1.1'] = (lines[0] ?? '').split(' ');
    let destination: EgressTarget | undefined;
    let forwardHead: string | undefined;
    if (method === 'CONNECT') destination = parseHostPort(target);
    else {
      const url = safeUrl(target);
      if (url?.protocol === 'http:') {
        destination = {
          host: url.hostname.replace(/^\[|\]$/g, '').toLowerCase(),
          port: Number(url.port || 80),
        };
        // Origin-form for the upstream, and no proxy credentials or hop-by-hop proxy headers.
        const headers = lines.slice(1).filter((line) => line !== '' && !/^proxy-/i.test(line));
        forwardHead = [`${method} ${url.pathname}${url.search} ${version}`, ...headers, '', ''].join('\r\n');
      }
    }
    if (!destination)
      return refuse(client, 400, 'only CONNECT host:port and absolute http:// requests are relayed');
    const name = key(destination);
    if (!this.allowed.has(name)) {
      this.options.onDenied?.(name);
      return refuse(client, 403, `${name} is not on this sandbox's network allow-list`);
    }
    tunnel.connecting();
    const { port } = destination;
    this.options.addresses.pin(destination.host).then(
      (pinned) => {
        if ('addresses' in pinned)
          return this.relay(
            client,
            { host: destination.host, port, addresses: pinned.addresses, name },
            forwardHead,
            rest,
            tunnel,
          );
        this.options.onDenied?.(name);
        refuse(client, 403, pinned.refused);
      },
      () => refuse(client, 502, `cannot resolve ${destination.host}`),
    );
  }

  /** Connects to the pinned addresses (never the name again) and pipes both ways once it is up. */
  private relay(
    client: Socket,
    upstreamAt: { host: string; port: number; addresses: string[]; name: string },
    forwardHead: string | undefined,
    rest: Buffer,
    tunnel: Tunnel,
  ): void {
    if (client.destroyed) return;
    // The resolver here answers with the pinned addresses only; node tries them (both families) in turn.
    const [first = ''] = upstreamAt.addresses;
    const upstream = connect({
      port: upstreamAt.port,
      host: upstreamAt.host,
      autoSelectFamily: true,
      lookup: (_host, options, callback) => {
        if (options.all)
          callback(
            null,
            upstreamAt.addresses.map((address) => ({ address, family: isIP(address) })),
          );
        else callback(null, first, isIP(first));
      },
    });
    this.track(upstream);
    client.once('close', () => upstream.destroy());
    upstream.once('error', () => refuse(client, 502, `cannot reach ${upstreamAt.name}`));
    upstream.once('connect', () => {
      upstream.removeAllListeners('error');
      if (forwardHead === undefined) client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      else upstream.write(forwardHead);
      if (rest.length > 0) upstream.write(rest);
      // After the first request every byte of this connection goes to the same upstream, so a
      // second request on a kept-alive connection cannot reach another host.
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
      tunnel.established();
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
  }

  private track(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => this.sockets.delete(socket));
  }
}

const key = (target: EgressTarget) =>
  `${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}`;

function safeUrl(value: string): URL | undefined {
  try {
    return new URL(value);
  } catch {
    return undefined;
  }
}

const REASONS: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  403: 'Forbidden',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

function refuse(client: Socket, status: number, message: string): void {
  if (client.destroyed) return;
  const reason = REASONS[status] ?? 'Bad Gateway';
  const body = `sigil sandbox: ${message}\n`;
  // Closed once the answer is flushed, not when the sandbox closes its end: it need not, ever.
  client.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    () => client.destroy(),
  );
}
