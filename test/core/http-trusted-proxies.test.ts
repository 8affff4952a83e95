import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { expect } from 'chai';
import { TrustedProxies } from '../../core/http/trusted-proxies.ts';
import { configSchema } from '../../services/config.ts';
import { serve, type Serving } from '../../services/serve.ts';
import { openTestKernel } from '../support/kernel.ts';

/** The balancer: the one loopback address the service trusts. Any other (127.0.0.1) is a client. */
const BALANCER = '127.0.0.2';
const CLIENT = '127.0.0.1';
const PER_CLIENT = 2;
/** The attestation routes' limit per client address a minute (services/shared/attestation.ts). */
const ATTESTATION_PER_MINUTE = 60;

/** A GET from the local address `from`, with an X-Forwarded-For when given: its status. */
function get(url: string, path: string, from: string, forwardedFor?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}${path}`,
      {
        localAddress: from,
        agent: false,
        headers: forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor },
      },
      (res) => {
        res.resume();
        res.once('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.once('error', reject);
    req.end();
  });
}

/** Whether a connection from `from` is served: it answers a request, or is closed at once. */
function openConnection(url: string, from: string): Promise<{ socket: Socket; served: boolean }> {
  const { hostname, port } = new URL(url);
  const socket = connect({ port: Number(port), host: hostname, localAddress: from });
  socket.on('error', () => undefined); // a connection closed over the cap is what a test may expect
  socket.write(`GET /health HTTP/1.1\r\nHost: ${new URL(url).host}\r\n\r\n`);
  return new Promise((resolve) => {
    socket.once('data', () => resolve({ socket, served: true }));
    socket.once('close', () => resolve({ socket, served: false }));
  });
}

describe('HTTP edge: trusted proxies (X-Forwarded-For)', () => {
  it('believes X-Forwarded-For only from a trusted proxy, and only the entries trusted proxies added', () => {
    const none = new TrustedProxies([]);
    expect(none.clientAddress('10.0.0.5', '198.51.100.1')).to.equal('10.0.0.5');
    expect(none.clientAddress('::ffff:10.0.0.5', '')).to.equal('10.0.0.5');
    const behind = new TrustedProxies(['10.0.0.0/8', '192.0.2.1', 'fd00::/8']);
    expect(behind.clientAddress('10.0.0.5', '198.51.100.1')).to.equal('198.51.100.1');
    expect(behind.clientAddress('::ffff:10.0.0.5', '198.51.100.1'), 'IPv4 on a dual-stack socket').to.equal(
      '198.51.100.1',
    );
    expect(behind.clientAddress('fd00::1', '2001:db8::7')).to.equal('2001:db8::7');
    // The client may send its own X-Forwarded-For: only what our proxies appended counts.
    expect(behind.clientAddress('10.0.0.5', '1.2.3.4, 198.51.100.1, 192.0.2.1')).to.equal('198.51.100.1');
    expect(behind.clientAddress('10.0.0.5', 'garbage, 198.51.100.1')).to.equal('198.51.100.1');
    expect(behind.clientAddress('10.0.0.5', '198.51.100.1, garbage')).to.equal('10.0.0.5');
    expect(behind.clientAddress('10.0.0.5', '')).to.equal('10.0.0.5');
    expect(behind.clientAddress('198.51.100.7', '10.0.0.9'), 'from an untrusted peer').to.equal(
      '198.51.100.7',
    );
  });

  it('refuses a trusted proxy that is no address or block, naming the setting', () => {
    const parsed = configSchema.safeParse({ gateway: { http: { trustedProxies: ['10.0.0.0/33', 'lb'] } } });
    expect(parsed.success).to.equal(false);
    expect(parsed.error?.issues.map((issue) => issue.path.join('.'))).to.deep.equal([
      'gateway.http.trustedProxies.0',
      'gateway.http.trustedProxies.1',
    ]);
  });

  describe('a gateway behind a balancer at 127.0.0.2', function () {
    this.timeout(60_000);
    let serving: Serving;
    let url: string;

    before(async () => {
      const kernel = await openTestKernel({
        config: {
          gateway: {
            port: 0,
            http: { maxConnectionsPerClient: PER_CLIENT, trustedProxies: [`${BALANCER}/32`] },
          },
          plugins: [{ resolve: 'tee-none', enabled: true, options: {} }],
        },
      });
      serving = await serve(kernel, ['gateway']);
      url = serving.urls.gateway as string;
    });
    after(() => serving.stop());

    it('keys the per-address rate limit by the forwarded client from the balancer, by the peer otherwise', async () => {
      // An untrusted peer naming a new client each time is still one client.
      for (let i = 0; i < ATTESTATION_PER_MINUTE; i++)
        expect(await get(url, '/api/attestation', CLIENT, `198.51.100.${i}`)).to.equal(200);
      expect(await get(url, '/api/attestation', CLIENT, '203.0.113.250'), 'spoofed header ignored').to.equal(
        429,
      );

      // Through the balancer, each forwarded client has its own budget, whatever it claims itself.
      for (let i = 0; i < ATTESTATION_PER_MINUTE; i++)
        expect(await get(url, '/api/attestation', BALANCER, `203.0.113.${i}, 198.51.100.1`)).to.equal(200);
      expect(await get(url, '/api/attestation', BALANCER, '198.51.100.1')).to.equal(429);
      expect(await get(url, '/api/attestation', BALANCER, '198.51.100.2')).to.equal(200);
    });

    it("caps a client's connections, but not the balancer's (it carries many clients)", async () => {
      const held: Socket[] = [];
      for (let i = 0; i < PER_CLIENT; i++) {
        const connection = await openConnection(url, CLIENT);
        held.push(connection.socket);
        expect(connection.served).to.equal(true);
      }
      const over = await openConnection(url, CLIENT);
      expect(over.served, "the connection over the client's cap").to.equal(false);
      for (let i = 0; i < PER_CLIENT * 3; i++) {
        const connection = await openConnection(url, BALANCER);
        held.push(connection.socket);
        expect(connection.served, `the balancer's connection ${i + 1}`).to.equal(true);
      }
      for (const socket of held) socket.destroy();
    });
  });
});
