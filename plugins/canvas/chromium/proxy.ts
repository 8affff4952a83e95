import {
  Agent,
  createServer,
  request,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { tunnelTarget, type AllowList } from './allow-list.ts';

/**
 * The browser's only way out: an HTTP proxy on loopback that relays plain HTTP requests (each one,
 * so every hop of a redirect is checked) and CONNECT tunnels (https, WebSockets) to what the allow-list
 * allows, and answers 403 to the rest. Page routing cannot do this alone: the browser follows a
 * redirect without asking the route again.
 */
export class AllowListProxy {
  private readonly server: Server;
  /** Upstream connections of plain requests; none kept alive, so none outlives the run. */
  private readonly agent = new Agent({ keepAlive: false });
  private readonly tunnels = new Set<Socket | Duplex>();

  constructor(private readonly allowList: AllowList) {
    this.server = createServer((incoming, outgoing) => this.relay(incoming, outgoing));
    this.server.on('connect', (incoming: IncomingMessage, client: Duplex, head: Buffer) =>
      this.tunnel(incoming, client, head),
    );
  }

  /** Listens on an ephemeral loopback port; resolves to the proxy's URL. */
  async listen(): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(0, '127.0.0.1', () => resolve());
    });
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const socket of this.tunnels) socket.destroy();
    this.server.closeAllConnections();
    this.agent.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private relay(incoming: IncomingMessage, outgoing: ServerResponse): void {
    const target = absoluteHttpUrl(incoming.url ?? '');
    if (target === undefined || !this.allowList.allows(target.href)) {
      outgoing.writeHead(403, { 'content-type': 'text/plain', connection: 'close' });
      outgoing.end("refused: not on the browser-verify node's allow-list\n");
      return;
    }
    const headers = Object.fromEntries(
      Object.entries(incoming.headers).filter(([name]) => !HOP_BY_HOP.test(name)),
    );
    const upstream = request(target, { method: incoming.method, headers, agent: this.agent }, (answer) => {
      outgoing.writeHead(answer.statusCode ?? 502, answer.statusMessage, answer.rawHeaders);
      answer.pipe(outgoing);
    });
    upstream.on('error', () => outgoing.destroy());
    incoming.pipe(upstream);
  }

  private tunnel(incoming: IncomingMessage, client: Duplex, head: Buffer): void {
    this.track(client);
    const target = tunnelTarget(incoming.url ?? '');
    if (target === undefined || !this.allowList.allowsTunnel(target)) {
      client.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      return;
    }
    const upstream = connect(target.port, target.host, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    this.track(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    upstream.on('close', close);
    client.on('close', close);
  }

  private track(socket: Socket | Duplex): void {
    this.tunnels.add(socket);
    socket.on('error', () => socket.destroy());
    socket.once('close', () => this.tunnels.delete(socket));
  }
}

/** Headers about the browser's connection to this proxy, not for the upstream. */
const HOP_BY_HOP = /^(?:proxy-.*|connection|keep-alive)$/;

/** An absolute-form `http:` request target (what a browser sends a proxy), or undefined. */
function absoluteHttpUrl(target: string): URL | undefined {
  try {
    const url = new URL(target);
    return url.protocol === 'http:' ? url : undefined;
  } catch {
    return undefined;
  }
}
