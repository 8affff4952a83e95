import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { expect } from 'chai';
import { configSchema } from '../../services/config.ts';
import type { Kernel } from '../../services/kernel.ts';
import { serve, type Serving } from '../../services/serve.ts';
import { openTestKernel } from '../support/kernel.ts';

interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One request over node:http, which sends any Host and Origin as given (fetch cannot forge Host). */
function rawRequest(
  url: string,
  options: { method?: string; path?: string; headers?: Record<string, string>; body?: string },
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      new URL(options.path ?? '/', url),
      { method: options.method ?? 'GET', headers: options.headers ?? {}, agent: false },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** A service's edge settings as config gives them by default. */
const HTTP_DEFAULTS = configSchema.parse({}).gateway.http;

const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } },
});
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/** An MCP initialize POSTed to `url`'s /mcp with `headers` (a Host or an Origin) besides MCP's own. */
const initialize = (url: string, headers: Record<string, string>) =>
  rawRequest(url, {
    method: 'POST',
    path: '/mcp',
    headers: { ...MCP_HEADERS, ...headers },
    body: INITIALIZE,
  });
const ALLOWED_ORIGIN = 'https://app.example';

/**
 * DNS rebinding: a hostile page whose name resolves to the service makes the browser send that name as
 * Host and the page's site as Origin. Both services refuse them, on the gateway's lane (POST /mcp) and
 * on the Koa chain alike, before any route runs.
 */
describe('HTTP edge: Host and Origin (DNS rebinding) and CORS', function () {
  this.timeout(30_000);
  let kernel: Kernel;
  let serving: Serving;
  let gateway: string;
  let runtime: string;

  before(async () => {
    const http = { allowedOrigins: [ALLOWED_ORIGIN], allowedHosts: ['gw.internal:8402'] };
    kernel = await openTestKernel({
      config: {
        gateway: { port: 0, http: { ...HTTP_DEFAULTS, ...http } },
        runtime: { port: 0 },
        plugins: [{ resolve: 'tee-none', enabled: true, options: {} }],
      },
    });
    serving = await serve(kernel, ['runtime', 'gateway']);
    gateway = serving.urls.gateway as string;
    runtime = serving.urls.runtime as string;
  });
  after(() => serving.stop());

  it('serves its own names: the loopback address it listens on, localhost with the port, a listed name', async () => {
    const port = new URL(gateway).port;
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`, 'gw.internal:8402']) {
      const health = await rawRequest(gateway, { path: '/health', headers: { host } });
      expect(health.status, host).to.equal(200);
      const mcp = await initialize(gateway, { host });
      expect(mcp.status, host).to.equal(200);
    }
  });

  it('refuses a forged Host with 421 host_not_allowed, on the lane and on the Koa chain, at both services', async () => {
    const port = new URL(gateway).port;
    for (const host of [`attacker.example:${port}`, 'attacker.example', `127.0.0.1:${Number(port) + 1}`]) {
      for (const [url, method, path, body] of [
        [gateway, 'POST', '/mcp', INITIALIZE],
        [gateway, 'POST', '/mcp/server/memory', INITIALIZE],
        [gateway, 'GET', '/api/servers', undefined],
        [gateway, 'POST', '/health', undefined],
        [runtime, 'GET', '/health/x', undefined],
        [runtime, 'GET', '/auth/challenge?address=0x0000000000000000000000000000000000000001', undefined],
      ] as const) {
        const res = await rawRequest(url, { method, path, headers: { ...MCP_HEADERS, host }, body });
        const what = `${host} ${method} ${url === gateway ? 'gateway' : 'runtime'}${path}`;
        expect(res.status, what).to.equal(421);
        const error = JSON.parse(res.body) as { code: string; message: string; details: { reason: string } };
        expect(error.code, what).to.equal('misdirected_request');
        expect(error.details.reason, what).to.equal('host_not_allowed');
        expect(error.message, what).to.include(host);
        expect(res.body, what).not.to.include('protocolVersion');
      }
    }
  });

  it('answers GET and HEAD /health whatever the Host (probes address a pod by its IP), and nothing else', async () => {
    const port = new URL(gateway).port;
    // A Kubernetes or load-balancer probe of a service bound to 0.0.0.0 names the pod's address.
    for (const host of ['10.244.1.17:8402', `attacker.example:${port}`]) {
      for (const url of [gateway, runtime]) {
        for (const path of ['/health', '/health?probe=1']) {
          const what = `${host} ${url === gateway ? 'gateway' : 'runtime'}${path}`;
          const health = await rawRequest(url, { path, headers: { host } });
          expect(health.status, what).to.equal(200);
          expect(JSON.parse(health.body), what).to.deep.include({ status: 'ok' });
          const head = await rawRequest(url, { method: 'HEAD', path, headers: { host } });
          expect(head.status, `HEAD ${what}`).to.equal(200);
        }
      }
      const mcp = await initialize(gateway, { host });
      expect(mcp.status, host).to.equal(421);
    }
  });

  it('refuses a hostile Origin with 403 origin_not_allowed, and gives it no CORS headers', async () => {
    for (const origin of [
      'https://attacker.example',
      'null',
      `http://localhost:${Number(new URL(gateway).port) + 1}`,
    ]) {
      for (const [url, method, path, body] of [
        [gateway, 'POST', '/mcp', INITIALIZE],
        [gateway, 'GET', '/api/servers', undefined],
        [runtime, 'GET', '/health', undefined],
      ] as const) {
        const res = await rawRequest(url, { method, path, headers: { ...MCP_HEADERS, origin }, body });
        const what = `${origin} ${method} ${path}`;
        expect(res.status, what).to.equal(403);
        expect(JSON.parse(res.body), what).to.deep.include({ code: 'forbidden' });
        expect((JSON.parse(res.body) as { details: unknown }).details, what).to.deep.equal({
          reason: 'origin_not_allowed',
        });
        expect(res.headers['access-control-allow-origin'], what).to.equal(undefined);
      }
    }
    // A preflight from it is refused too, so the browser never sends the request.
    const preflight = await rawRequest(gateway, {
      method: 'OPTIONS',
      path: '/mcp',
      headers: { origin: 'https://attacker.example', 'access-control-request-method': 'POST' },
    });
    expect(preflight.status).to.equal(403);
    expect(preflight.headers['access-control-allow-origin']).to.equal(undefined);
  });

  it('serves requests without an Origin (clients that are not browsers) and its own origin', async () => {
    const own = `http://127.0.0.1:${new URL(gateway).port}`;
    const res = await initialize(gateway, { origin: own });
    expect(res.status).to.equal(200);
    expect(res.headers['access-control-allow-origin']).to.equal(own);
  });

  it('answers an allowed origin: the preflight of POST /mcp, then the call with CORS headers', async () => {
    const preflight = await rawRequest(gateway, {
      method: 'OPTIONS',
      path: '/mcp',
      headers: {
        origin: ALLOWED_ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type, authorization, mcp-protocol-version',
      },
    });
    expect(preflight.status).to.equal(204);
    expect(preflight.headers['access-control-allow-origin']).to.equal(ALLOWED_ORIGIN);
    expect(preflight.headers['access-control-allow-methods']).to.equal('POST');
    const allowed = (preflight.headers['access-control-allow-headers'] as string).split(', ');
    expect(allowed).to.include.members([
      'content-type',
      'authorization',
      'mcp-protocol-version',
      // The standard headers every MCP 2026-07-28 request carries.
      'mcp-method',
      'mcp-name',
      'mcp-session-id',
      'x-mcp-session',
      'payment-signature',
    ]);
    expect(preflight.headers.vary).to.equal('Origin');
    const perServer = await rawRequest(gateway, {
      method: 'OPTIONS',
      path: '/mcp/server/memory',
      headers: { origin: ALLOWED_ORIGIN, 'access-control-request-method': 'POST' },
    });
    expect(perServer.status).to.equal(204);
    expect(perServer.headers['access-control-allow-methods']).to.equal('POST');

    const call = await initialize(gateway, { origin: ALLOWED_ORIGIN });
    expect(call.status).to.equal(200);
    expect(call.headers['access-control-allow-origin']).to.equal(ALLOWED_ORIGIN);
    const exposed = (call.headers['access-control-expose-headers'] as string).split(', ');
    expect(exposed).to.include.members([
      'mcp-session-id',
      'www-authenticate',
      'payment-required',
      'payment-response',
    ]);
    // An error keeps them, so the page can read why (a bad token here).
    const refused = await initialize(gateway, {
      origin: ALLOWED_ORIGIN,
      authorization: 'Bearer sigil_wt_not-a-token',
    });
    expect(refused.status).to.equal(401);
    expect(refused.headers['access-control-allow-origin']).to.equal(ALLOWED_ORIGIN);
    // The runtime did not list that origin.
    const atRuntime = await rawRequest(runtime, { path: '/health', headers: { origin: ALLOWED_ORIGIN } });
    expect(atRuntime.status).to.equal(403);
  });
});
