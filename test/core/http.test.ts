import { request as httpRequest } from 'node:http';
import Router from '@koa/router';
import { expect } from 'chai';
import { pino } from 'pino';
import { z } from 'zod';
import { SigilError } from '../../core/errors.ts';
import type { Logger } from '../../core/log.ts';
import { createHttpApp } from '../../core/http/app.ts';
import { listen, type RunningServer } from '../../core/http/server.ts';
import { openSse } from '../../core/http/sse.ts';
import { parseInput } from '../../core/http/validate.ts';
import { quietLogger } from '../support/kernel.ts';

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
});

describe('HTTP core: request logging', () => {
  it('gives a request’s log lines its id and the fields set by then, and ends with an access line holding them', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const router = new Router();
    router.get('/logs', (ctx) => {
      const state = ctx.state as { log: Logger; logFields?: Record<string, unknown> };
      state.log.info('before');
      state.logFields = { auth: 'wallet-token' };
      state.log.info('after');
      ctx.body = {};
    });
    const { app } = createHttpApp({ service: 'test', logger, bodyLimitBytes: 1024, routers: [router] });
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
  it('serves hot routes by their own chain: core middleware and theirs, no body parser, no other router', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const seenBy =
      (chain: string) => async (ctx: { state: Record<string, unknown> }, next: () => Promise<unknown>) => {
        ctx.state.chain = chain;
        await next();
      };
    const answer = (ctx: { state: Record<string, unknown>; request: { body?: unknown }; body: unknown }) => {
      ctx.body = { chain: ctx.state.chain, parsed: ctx.request.body !== undefined };
    };
    const full = new Router().post('/hot', answer).post('/cold', answer);
    const hot = new Router().post('/hot', answer).post('/hot/fail', () => {
      throw new SigilError('conflict', 'Already done');
    });
    const app = createHttpApp({
      service: 'test',
      logger,
      bodyLimitBytes: 1024,
      middleware: [seenBy('full')],
      routers: [full],
      hotRoutes: {
        matches: (method, url) => method === 'POST' && url?.startsWith('/hot') === true,
        middleware: [seenBy('hot')],
        router: hot,
      },
    });
    const running = await listen(app, '127.0.0.1', 0);
    const send = (path: string) =>
      fetch(`${running.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': `id${path.replaceAll('/', '-')}` },
        body: '{"a":1}',
      });
    try {
      const hotAnswer = await send('/hot');
      expect(hotAnswer.status).to.equal(200);
      expect(hotAnswer.headers.get('x-request-id')).to.equal('id-hot');
      expect(await hotAnswer.json()).to.deep.equal({ chain: 'hot', parsed: false });
      expect(await (await send('/cold')).json()).to.deep.equal({ chain: 'full', parsed: true });
      const failed = await send('/hot/fail');
      expect(failed.status).to.equal(409);
      expect(await failed.json()).to.deep.equal({ code: 'conflict', message: 'Already done' });
      const nowhere = await send('/hot/nowhere');
      expect(nowhere.status).to.equal(404);
      expect(((await nowhere.json()) as { code: string }).code).to.equal('not_found');
      const metrics = await (await fetch(`${running.url}/metrics`)).text();
      expect(metrics).to.match(/http_requests_total\{[^}]*route="\/hot"[^}]*status="200"[^}]*\} 1/);
      expect(metrics).to.match(/http_requests_total\{[^}]*route="\/hot\/fail"[^}]*status="409"[^}]*\} 1/);
    } finally {
      await running.close(0);
    }
    const access = lines.filter((line) => line.msg === 'request');
    expect(access.map((line) => [line.reqId, line.status])).to.deep.include.members([
      ['id-hot', 200],
      ['id-cold', 200],
      ['id-hot-fail', 409],
      ['id-hot-nowhere', 404],
    ]);
  });
});
