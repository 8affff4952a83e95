import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import Router from '@koa/router';
import { expect } from 'chai';
import { pino } from 'pino';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../core/log.ts';
import { createHttpApp } from '../../core/http/app.ts';
import type { LaneRoute } from '../../core/http/lane.ts';
import { listen, type RunningServer } from '../../core/http/server.ts';
import { openSse } from '../../core/http/sse.ts';
import { parseInput } from '../../core/http/validate.ts';
import { quietLogger } from '../support/kernel.ts';

/** A service on 127.0.0.1 at a port the OS picks, allowing no other name or origin. */
const LOOPBACK_EDGE = { host: '127.0.0.1', port: 0, http: { allowedHosts: [], allowedOrigins: [] } };

describe('HTTP core', () => {
  let server: RunningServer;
  let releaseSlow: () => void = () => undefined;
  let sseAborted: Promise<void>;

  before(async () => {
    const router = new Router();
    let onAbort: () => void = () => undefined;
    sseAborted = new Promise((resolve) => (onAbort = resolve));
    router.post('/echo', (ctx) => {
      const body = parseInput(
        z.object({ name: z.string().min(1), count: z.number().int() }).strict(),
        ctx.request.body,
        'body',
      );
      ctx.body = { hello: body.name, count: body.count };
    });
    router.get('/typed', () => {
      throw new SigilError('forbidden', 'Not your agent', { hint: 'Sign in with the owner wallet' });
    });
    router.get('/crash', () => {
      throw new Error('db password is hunter2-canary');
    });
    router.get('/slow', async (ctx) => {
      await new Promise<void>((resolve) => (releaseSlow = resolve));
      ctx.body = { finished: true };
    });
    router.get('/events', (ctx) => {
      const sse = openSse(ctx);
      sse.send('delta', { text: 'hi' }, '1');
      sse.send('done', { ok: true });
      sse.signal.addEventListener('abort', onAbort);
    });
    const { app } = createHttpApp({
      service: 'test',
      logger: quietLogger(),
      bodyLimitBytes: 1024,
      edge: LOOPBACK_EDGE,
      routers: [router],
    });
    server = await listen(app, '127.0.0.1', 0);
  });
  after(() => server.close(0));

  const post = (path: string, body: string, type = 'application/json') =>
    fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': type }, body });

  it('validates input: good input passes, each bad field is a 400 naming it', async () => {
    const ok = await post('/echo', JSON.stringify({ name: 'ada', count: 2 }));
    expect(ok.status).to.equal(200);
    expect(await ok.json()).to.deep.equal({ hello: 'ada', count: 2 });
    const bad = await post('/echo', JSON.stringify({ name: '', count: 1.5, extra: true }));
    expect(bad.status).to.equal(400);
    const body = (await bad.json()) as {
      code: string;
      message: string;
      details: { issues: { path: string }[] };
    };
    expect(body.code).to.equal('invalid_request');
    expect(body.details.issues.map((i) => i.path)).to.include.members(['body.name', 'body.count']);
  });

  it('answers malformed JSON with 400 and an oversized body with 413', async () => {
    const malformed = await post('/echo', '{"name": ');
    expect(malformed.status).to.equal(400);
    expect(((await malformed.json()) as { code: string }).code).to.equal('invalid_request');
    const huge = await post('/echo', JSON.stringify({ name: 'x'.repeat(5000), count: 1 }));
    expect(huge.status).to.equal(413);
    expect(await huge.json()).to.deep.include({ code: 'payload_too_large' });
  });

  it('maps typed errors to their status with code, message and hint', async () => {
    const res = await fetch(`${server.url}/typed`);
    expect(res.status).to.equal(403);
    expect(await res.json()).to.deep.equal({
      code: 'forbidden',
      message: 'Not your agent',
      hint: 'Sign in with the owner wallet',
    });
  });

  it('hides unexpected errors behind a generic 500 without stack or message', async () => {
    const res = await fetch(`${server.url}/crash`);
    expect(res.status).to.equal(500);
    const text = await res.text();
    expect(text).not.to.include('hunter2');
    expect(text).not.to.include('at ');
    expect(JSON.parse(text)).to.include({ code: 'internal' });
  });

  it('answers unknown routes with 404 and wrong methods with 405, in the same shape', async () => {
    const missing = await fetch(`${server.url}/nowhere`);
    expect(missing.status).to.equal(404);
    expect(await missing.json()).to.deep.include({ code: 'not_found' });
    const wrongMethod = await fetch(`${server.url}/typed`, { method: 'DELETE' });
    expect(wrongMethod.status).to.equal(405);
    expect(await wrongMethod.json()).to.deep.include({ code: 'method_not_allowed' });
  });

  it('keeps a well-formed X-Request-Id and replaces a malformed one', async () => {
    const kept = await fetch(`${server.url}/typed`, { headers: { 'x-request-id': 'abc-123' } });
    expect(kept.headers.get('x-request-id')).to.equal('abc-123');
    const replaced = await fetch(`${server.url}/typed`, {
      headers: { 'x-request-id': 'bad id\twith spaces' },
    });
    expect(replaced.headers.get('x-request-id')).to.match(/^[0-9a-f-]{36}$/);
  });

  it('serves Prometheus metrics labelled by route template', async () => {
    await fetch(`${server.url}/typed`);
    const res = await fetch(`${server.url}/metrics`);
    expect(res.headers.get('content-type')).to.match(/text\/plain/);
    const text = await res.text();
    expect(text).to.match(
      /http_requests_total\{method="GET",route="\/typed",status="403",service="test"\} \d+/,
    );
  });

  it('streams SSE events and signals abort when the client disconnects', async () => {
    const chunks = await new Promise<string>((resolve, reject) => {
      const req = httpRequest(`${server.url}/events`, (res) => {
        expect(res.headers['content-type']).to.match(/text\/event-stream/);
        res.setEncoding('utf8');
        let text = '';
        res.on('data', (chunk: string) => {
          text += chunk;
          if (text.includes('event: done')) {
            req.destroy();
            resolve(text);
          }
        });
      });
      req.on('error', (err) => (err.message.includes('aborted') ? undefined : reject(err)));
      req.end();
    });
    expect(chunks).to.include('id: 1\nevent: delta\ndata: {"text":"hi"}\n\n');
    await sseAborted;
  });

  it('shuts down gracefully: the in-flight request finishes, new connections are refused', async () => {
    const { app } = createHttpApp({
      service: 'graceful',
      logger: quietLogger(),
      bodyLimitBytes: 1024,
      edge: LOOPBACK_EDGE,
      routers: [
        new Router().get('/slow', async (ctx) => {
          await new Promise<void>((resolve) => (releaseSlow = resolve));
          ctx.body = { finished: true };
        }),
      ],
    });
    const graceful = await listen(app, '127.0.0.1', 0);
    const inFlight = fetch(`${graceful.url}/slow`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const closed = graceful.close(5000);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const refused = await fetch(`${graceful.url}/slow`).then(
      () => false,
      () => true,
    );
    expect(refused).to.equal(true);
    releaseSlow();
    const res = await inFlight;
    expect(res.status).to.equal(200);
    expect(await res.json()).to.deep.equal({ finished: true });
    await closed;
  });

  it('shuts down as soon as an open stream ends: its keep-alive connection, and one never used, are closed, not waited on', async () => {
    let endStream: () => void = () => undefined;
    const { app } = createHttpApp({
      service: 'streams',
      logger: quietLogger(),
      bodyLimitBytes: 1024,
      edge: LOOPBACK_EDGE,
      routers: [
        new Router().get('/events', (ctx) => {
          const sse = openSse(ctx);
          sse.send('hello', {});
          endStream = () => {
            sse.send('bye', {});
            sse.close();
          };
        }),
      ],
    });
    const running = await listen(app, '127.0.0.1', 0);
    // fetch keeps its connections alive (4 s idle): the server must close this one itself.
    const res = await fetch(`${running.url}/events`);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).to.include('event: hello');
    // A connection opened ahead, as clients do, that has not sent a request (yet).
    const ahead = connect(Number(new URL(running.url).port), '127.0.0.1');
    await once(ahead, 'connect');
    const aheadClosed = once(ahead, 'close');
    const started = Date.now();
    let closedAt = 0;
    const closed = running.close(10_000).then(() => (closedAt = Date.now()));
    endStream();
    let rest = '';
    for (let part = await reader.read(); !part.done; part = await reader.read())
      rest += new TextDecoder().decode(part.value);
    expect(rest).to.equal('event: bye\ndata: {}\n\n');
    await closed;
    await aheadClosed;
    expect(closedAt - started, 'closed long before its grace, and its client idle timeout').to.be.below(
      2_000,
    );
  });
});

describe('HTTP core: request logging', () => {
  it('gives a request’s log lines its id and the fields set by then, and ends with an access line holding them', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const router = new Router();
    router.get('/logs', (ctx) => {
      const state = ctx.state as { log: Logger; logFields?: Record<string, unknown> };
      state.log.info('before');
      state.logFields = { auth: 'wallet-token' };
      state.log.info('after');
      ctx.body = {};
    });
    const { app } = createHttpApp({
      service: 'test',
      logger,
      bodyLimitBytes: 1024,
      edge: LOOPBACK_EDGE,
      routers: [router],
    });
    const running = await listen(app, '127.0.0.1', 0);
    try {
      const res = await fetch(`${running.url}/logs`, { headers: { 'x-request-id': 'req-1' } });
      expect(res.status).to.equal(200);
    } finally {
      await running.close(0);
    }
    const line = (msg: string) => lines.find((entry) => entry.msg === msg);
    expect(line('before')).to.include({ reqId: 'req-1' }).and.not.have.property('auth');
    expect(line('after')).to.include({ reqId: 'req-1', auth: 'wallet-token' });
    expect(line('request')).to.include({ reqId: 'req-1', auth: 'wallet-token', path: '/logs', status: 200 });
  });
  it('serves lane routes without Koa: the same id, access line, metrics and error shape; the rest goes to the app', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const koaRouter = new Router().post('/cold', (ctx) => {
      ctx.body = { parsed: ctx.request.body };
    });
    const echo: LaneRoute = {
      method: 'POST',
      path: '/lane/:name',
      handle: async (exchange) => {
        if (exchange.params.name === 'fail')
          throw new SigilError('payment_required', 'Pay first', { headers: { 'PAYMENT-REQUIRED': 'abc' } });
        if (exchange.params.name === 'crash') throw new Error('db password is hunter2-canary');
        if (exchange.params.name === 'quiet') return { status: 202, body: null };
        const body = (await exchange.request.rawBody()).toString('utf8');
        return {
          status: 200,
          body: JSON.stringify({ name: exchange.params.name, body, steps: exchange.logFields }),
        };
      },
    };
    const { callback } = createHttpApp({
      service: 'test',
      logger,
      bodyLimitBytes: 64,
      edge: LOOPBACK_EDGE,
      routers: [koaRouter],
      lane: {
        steps: [
          async (exchange) => {
            exchange.logFields = { first: true };
          },
          async (exchange) => {
            exchange.logFields = { ...exchange.logFields, second: true };
            exchange.setHeader('X-Step', 'ran');
          },
        ],
        routes: [echo],
      },
    });
    const running = await listen({ callback }, '127.0.0.1', 0);
    const idOf = (path: string) => `id${path.replace(/[^a-z]/g, '-')}`;
    const send = (path: string, body = '{"a":1}') =>
      fetch(`${running.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': idOf(path) },
        body,
      });
    try {
      const served = await send('/lane/h%C3%A9?q=1');
      expect(served.status).to.equal(200);
      expect(served.headers.get('x-request-id')).to.equal(idOf('/lane/h%C3%A9?q=1'));
      expect(served.headers.get('x-step')).to.equal('ran');
      expect(served.headers.get('content-type')).to.equal('application/json; charset=utf-8');
      expect(await served.json()).to.deep.equal({
        name: 'hé',
        body: '{"a":1}',
        steps: { first: true, second: true },
      });
      expect((await send('/lane/slash/')).status).to.equal(200);
      expect(await (await send('/cold')).json()).to.deep.equal({ parsed: { a: 1 } });

      const failed = await send('/lane/fail');
      expect(failed.status).to.equal(402);
      expect(failed.headers.get('payment-required')).to.equal('abc');
      expect(await failed.json()).to.deep.equal({ code: 'payment_required', message: 'Pay first' });
      const crashed = await send('/lane/crash');
      expect(crashed.status).to.equal(500);
      const crashText = await crashed.text();
      expect(crashText).to.not.include('hunter2').and.not.include('at ');
      expect(JSON.parse(crashText)).to.include({ code: 'internal' });
      const quiet = await send('/lane/quiet');
      expect(quiet.status).to.equal(202);
      expect(await quiet.text()).to.equal('');
      expect((await send('/lane/big', JSON.stringify({ pad: 'x'.repeat(100) }))).status).to.equal(413);
      // Chunked, no declared length: refused when it grows past the limit, and still answered.
      const chunked = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${running.url}/lane/chunked`, { method: 'POST' }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
        req.write('x'.repeat(50));
        setTimeout(() => req.end('y'.repeat(50)), 20);
      });
      expect(chunked).to.equal(413);
      // Not a lane route: the app answers, in the same shape.
      const elsewhere = await send('/lane/a/b');
      expect(elsewhere.status).to.equal(404);
      expect(((await elsewhere.json()) as { code: string }).code).to.equal('not_found');

      const metrics = await (await fetch(`${running.url}/metrics`)).text();
      expect(metrics).to.match(/http_requests_total\{[^}]*route="\/lane\/:name"[^}]*status="200"[^}]*\} 2/);
      expect(metrics).to.match(/http_requests_total\{[^}]*route="\/lane\/:name"[^}]*status="402"[^}]*\} 1/);
    } finally {
      await running.close(0);
    }
    const access = lines.filter((line) => line.msg === 'request');
    expect(access.find((line) => line.reqId === idOf('/lane/h%C3%A9?q=1'))).to.include({
      method: 'POST',
      path: '/lane/h%C3%A9',
      status: 200,
      first: true,
      second: true,
    });
    expect(access.map((line) => line.status)).to.include.members([402, 500, 202, 413, 404]);
    expect(access.filter((line) => line.path === '/lane/chunked')).to.have.lengthOf(1);
    const failure = lines.find((line) => line.msg === 'request failed');
    expect(failure).to.include({ reqId: idOf('/lane/crash'), first: true, second: true });
  });
});
