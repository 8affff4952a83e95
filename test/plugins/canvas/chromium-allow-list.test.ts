import { once } from 'node:events';
import {
  createServer as createHttpServer,
  request,
  type IncomingMessage,
  type Server as HttpServer,
} from 'node:http';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';
import { expect } from 'chai';
import { AllowList, tunnelTarget } from '../../../plugins/canvas/chromium/allow-list.ts';
import { AllowListProxy } from '../../../plugins/canvas/chromium/proxy.ts';

describe("canvas-chromium: the browser's allow-list and the proxy that enforces it on every hop", () => {
  it('allows listed origins and the preview prefix only, however the URL is spelled', () => {
    const list = new AllowList(['http://127.0.0.1:8080'], 'http://127.0.0.1:9000/preview/token/');
    for (const url of [
      'http://127.0.0.1:8080/any/path?q=1',
      'ws://127.0.0.1:8080/socket',
      'http://127.0.0.1:9000/preview/token/index.html',
    ])
      expect(list.allows(url), url).to.equal(true);
    for (const url of [
      'https://127.0.0.1:8080/',
      'http://localhost:8080/',
      'http://127.0.0.1:8081/',
      'http://127.0.0.1:9000/api/runs',
      'http://127.0.0.1:9000/preview/token/../../api/runs',
      'http://127.0.0.1:9000/preview/token/%2e%2e/%2e%2e/api/runs',
      'http://127.0.0.1:9000/preview/tokenized/',
      'file:///etc/passwd',
      'not a url',
    ])
      expect(list.allows(url), url).to.equal(false);
  });

  it('opens tunnels to the host and port of an allowed origin only', () => {
    const list = new AllowList(['https://example.test', 'http://[::1]:8080'], undefined);
    const allows = (target: string) => {
      const parsed = tunnelTarget(target);
      return parsed !== undefined && list.allowsTunnel(parsed);
    };
    expect(allows('example.test:443')).to.equal(true);
    expect(allows('EXAMPLE.test:443')).to.equal(true);
    expect(allows('[::1]:8080')).to.equal(true);
    for (const target of [
      'example.test:444',
      'other.test:443',
      'example.test',
      'a@example.test:443',
      'x/y:443',
    ])
      expect(allows(target), target).to.equal(false);
  });

  describe('AllowListProxy', () => {
    let allowed: HttpServer;
    let allowedOrigin: string;
    /** Counts connections: a refused destination must see none. */
    let outside: Server;
    let outsideConnections = 0;
    let proxy: AllowListProxy;
    let proxyUrl: URL;

    before(async () => {
      allowed = createHttpServer((_, response) => response.end('inside'));
      allowed.listen(0, '127.0.0.1');
      outside = createServer((socket) => {
        outsideConnections++;
        socket.destroy();
      });
      outside.listen(0, '127.0.0.1');
      await Promise.all([once(allowed, 'listening'), once(outside, 'listening')]);
      allowedOrigin = `http://127.0.0.1:${(allowed.address() as AddressInfo).port}`;
      proxy = new AllowListProxy(new AllowList([allowedOrigin], undefined));
      proxyUrl = new URL(await proxy.listen());
    });

    after(async () => {
      await proxy.close();
      allowed.closeAllConnections();
      await Promise.all([
        new Promise((resolve) => allowed.close(resolve)),
        new Promise((resolve) => outside.close(resolve)),
      ]);
    });

    /** A plain HTTP request through the proxy: its status and body. */
    const viaProxy = async (url: string) => {
      const outgoing = request({ host: proxyUrl.hostname, port: proxyUrl.port, path: url });
      outgoing.end();
      const [response] = (await once(outgoing, 'response')) as [IncomingMessage];
      let body = '';
      for await (const chunk of response) body += String(chunk);
      return { status: response.statusCode, body };
    };

    /** The status line the proxy answers a CONNECT to `target` with. */
    const connectVia = async (target: string) => {
      const socket = connect(Number(proxyUrl.port), proxyUrl.hostname);
      await once(socket, 'connect');
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
      const [chunk] = (await once(socket, 'data')) as [Buffer];
      socket.destroy();
      return chunk.toString('latin1').split('\r\n')[0];
    };

    const outsideTarget = () => `127.0.0.1:${(outside.address() as AddressInfo).port}`;

    it('relays plain HTTP to an allowed origin and refuses another with 403, never connecting to it', async () => {
      expect(await viaProxy(`${allowedOrigin}/`)).to.deep.equal({ status: 200, body: 'inside' });
      expect((await viaProxy(`http://${outsideTarget()}/`)).status).to.equal(403);
      expect((await viaProxy('/origin-form')).status).to.equal(403);
      expect(outsideConnections).to.equal(0);
    });

    it('tunnels to an allowed host and port and refuses another with 403, never connecting to it', async () => {
      expect(await connectVia(allowedOrigin.slice('http://'.length))).to.equal(
        'HTTP/1.1 200 Connection Established',
      );
      expect(await connectVia(outsideTarget())).to.equal('HTTP/1.1 403 Forbidden');
      expect(outsideConnections).to.equal(0);
    });
  });
});
