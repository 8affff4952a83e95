import { connect, type Socket } from 'node:net';
import { expect } from 'chai';
import { configSchema } from '../../services/config.ts';
import { clientOf } from '../../core/http/client-connections.ts';
import { serve, type Serving } from '../../services/serve.ts';
import { openTestKernel } from '../support/kernel.ts';

const LIMITS = { headersTimeoutMs: 400, requestTimeoutMs: 800, keepAliveTimeoutMs: 5_000, maxConnections: 3 };
/** Far more than the limits allow at one byte per DRIP_MS: a server that never cuts the client off fails. */
const MAX_BYTES = 400;
const DRIP_MS = 25;

/** A connection to a service, with everything it received and a promise of its close. */
class RawConnection {
  received = '';
  readonly closed: Promise<void>;
  private readonly socket: Socket;

  /** `from`: the local address to connect from (another loopback address is another client). */
  constructor(url: string, from?: string) {
    const { hostname, port } = new URL(url);
    this.socket = connect({ port: Number(port), host: hostname, localAddress: from });
    this.socket.setEncoding('utf8');
    this.socket.on('data', (chunk: string) => (this.received += chunk));
    this.socket.on('error', () => undefined); // a refused or reset connection is what some tests expect
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
  }

  get isClosed(): boolean {
    return this.socket.destroyed;
  }

  write(text: string): void {
    if (!this.socket.destroyed) this.socket.write(text);
  }

  /** Sends `text` one byte every DRIP_MS until it is all sent or the server closes: how many were sent. */
  async drip(text: string): Promise<number> {
    let sent = 0;
    const timer = setInterval(() => {
      if (sent < text.length && !this.socket.destroyed) this.socket.write(text[sent++] as string);
      else this.socket.destroy();
    }, DRIP_MS);
    await this.closed;
    clearInterval(timer);
    return sent;
  }

  /** Sends a whole request and waits for a whole answer to it (the connection stays open). */
  async roundTrip(request: string): Promise<string> {
    const before = this.received.length;
    this.write(request);
    await new Promise<void>((resolve, reject) => {
      const check = () => {
        const answer = this.received.slice(before);
        const length = /content-length: (\d+)/i.exec(answer);
        const end = answer.indexOf('\r\n\r\n');
        if (length && end !== -1 && answer.length >= end + 4 + Number(length[1])) done(resolve);
      };
      const gone = () => done(() => reject(new Error(`closed with: ${this.received.slice(before)}`)));
      const done = (settle: () => void) => {
        this.socket.off('data', check);
        this.socket.off('close', gone);
        settle();
      };
      this.socket.on('data', check);
      this.socket.once('close', gone);
    });
    return this.received.slice(before);
  }

  close(): Promise<void> {
    this.socket.destroy();
    return this.closed;
  }
}

const healthRequest = (url: string) => `GET /health HTTP/1.1\r\nHost: ${new URL(url).host}\r\n\r\n`;

/**
 * The answer to a request on a new connection, after a held one closed: the server learns of that
 * close on its own time, so a few attempts, each ended by an event. The connections join `held`.
 */
async function answeredOnceFreed(url: string, held: RawConnection[], from?: string): Promise<string> {
  let answered = '';
  for (let attempt = 0; attempt < 20 && answered === ''; attempt++) {
    const next = new RawConnection(url, from);
    answered = await next.roundTrip(healthRequest(url)).catch(() => '');
    held.push(next);
  }
  return answered;
}

/**
 * A client may hold a service only so long and so much: slow headers and slow bodies are cut off, and
 * connections beyond the cap are closed as they arrive, at both services (their config's `http`).
 */
describe('HTTP edge: server limits (slowloris, slow bodies, connection cap)', function () {
  this.timeout(60_000);
  let serving: Serving;
  let urls: { gateway: string; runtime: string };

  before(async () => {
    const http = { ...configSchema.parse({}).gateway.http, ...LIMITS };
    const kernel = await openTestKernel({
      config: {
        gateway: { port: 0, http },
        runtime: { port: 0, http },
        plugins: [{ resolve: 'tee-none', enabled: true, options: {} }],
      },
    });
    serving = await serve(kernel, ['runtime', 'gateway']);
    urls = { gateway: serving.urls.gateway as string, runtime: serving.urls.runtime as string };
  });
  after(() => serving.stop());

  for (const service of ['gateway', 'runtime'] as const) {
    it(`${service}: a client sending its headers one byte at a time is answered 408 and cut off`, async () => {
      const connection = new RawConnection(urls[service]);
      const request = `GET /health HTTP/1.1\r\nHost: ${new URL(urls[service]).host}\r\nX-Slow: ${'a'.repeat(MAX_BYTES)}\r\n\r\n`;
      const sent = await connection.drip(request);
      expect(sent, 'bytes sent before the server closed').to.be.lessThan(request.length);
      expect(connection.received).to.match(/^HTTP\/1\.1 408 /);
    });
  }

  it('a body sent one byte at a time is cut off, on the lane (POST /mcp) and on the Koa chain', async () => {
    for (const path of ['/mcp', '/api/auth/verify']) {
      const connection = new RawConnection(urls.gateway);
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping', pad: 'a'.repeat(MAX_BYTES) });
      connection.write(
        `POST ${path} HTTP/1.1\r\nHost: ${new URL(urls.gateway).host}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`,
      );
      const sent = await connection.drip(body);
      expect(sent, `${path}: body bytes sent before the server closed`).to.be.lessThan(body.length);
    }
  });

  it('refuses connections beyond maxConnections, and takes new ones once others close', async () => {
    const held: RawConnection[] = [];
    for (let i = 0; i < LIMITS.maxConnections; i++) {
      const connection = new RawConnection(urls.gateway);
      held.push(connection);
      // Answered: the server holds it (keep-alive), and counts it.
      expect(await connection.roundTrip(healthRequest(urls.gateway))).to.match(/^HTTP\/1\.1 200 /);
    }
    const refused = new RawConnection(urls.gateway);
    refused.write(healthRequest(urls.gateway));
    await refused.closed;
    expect(refused.received, 'the connection over the cap').to.equal('');

    await (held.shift() as RawConnection).close();
    expect(await answeredOnceFreed(urls.gateway, held)).to.match(/^HTTP\/1\.1 200 /);
    await Promise.all(held.map((connection) => connection.close()));
  });
});

/**
 * One client cannot take a service's every connection: beyond `maxConnectionsPerClient` from one
 * address (an IPv6 /64), its new connections are closed as they arrive, while other clients are served.
 */
describe('HTTP edge: connections per client', function () {
  this.timeout(60_000);
  const PER_CLIENT = 5;
  let serving: Serving;
  let gateway: string;

  before(async () => {
    const http = { ...configSchema.parse({}).gateway.http, maxConnectionsPerClient: PER_CLIENT };
    const kernel = await openTestKernel({
      config: { gateway: { port: 0, http }, plugins: [{ resolve: 'tee-none', enabled: true, options: {} }] },
    });
    serving = await serve(kernel, ['gateway']);
    gateway = serving.urls.gateway as string;
  });
  after(() => serving.stop());

  it("closes a client's connections beyond its cap, serves another client, and takes the first again once one closes", async () => {
    const held: RawConnection[] = [];
    for (let i = 0; i < PER_CLIENT; i++) {
      const connection = new RawConnection(gateway, '127.0.0.1');
      held.push(connection);
      expect(await connection.roundTrip(healthRequest(gateway))).to.match(/^HTTP\/1\.1 200 /);
    }
    const refused = new RawConnection(gateway, '127.0.0.1');
    refused.write(healthRequest(gateway));
    await refused.closed;
    expect(refused.received, "the connection over the client's cap").to.equal('');

    // Another address on loopback is another client: the first one's connections do not count.
    const other = new RawConnection(gateway, '127.0.0.2');
    expect(await other.roundTrip(healthRequest(gateway))).to.match(/^HTTP\/1\.1 200 /);
    held.push(other);

    await (held.shift() as RawConnection).close();
    expect(await answeredOnceFreed(gateway, held, '127.0.0.1')).to.match(/^HTTP\/1\.1 200 /);
    await Promise.all(held.map((connection) => connection.close()));
  });

  it('counts an IPv6 client by its /64 and an IPv4-mapped address as the IPv4 one', () => {
    expect(clientOf('2001:db8:1:2::1')).to.equal(clientOf('2001:db8:1:2:ffff:ffff:ffff:ffff'));
    expect(clientOf('2001:db8:1:2::1')).to.equal(clientOf('2001:0DB8:0001:0002:0:0:0:7'));
    expect(clientOf('2001:db8:1:2::1')).not.to.equal(clientOf('2001:db8:1:3::1'));
    expect(clientOf('::1')).not.to.equal(clientOf('::2:0:0:0:1'));
    expect(clientOf('fe80::1%eth0')).to.equal(clientOf('fe80::2'));
    expect(clientOf('::ffff:10.0.0.7')).to.equal(clientOf('10.0.0.7'));
    expect(clientOf('10.0.0.7')).not.to.equal(clientOf('10.0.0.8'));
  });
});
