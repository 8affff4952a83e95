import Router from '@koa/router';
import { expect } from 'chai';
import type { DestinationStream } from 'pino';
import { SigilError } from '@sigil/plugin-api';
import { createHttpApp } from '../../core/http/app.ts';
import { listen } from '../../core/http/server.ts';
import { createLogger } from '../../core/log.ts';
import { serve } from '../../services/serve.ts';
import { openTestKernel } from '../support/kernel.ts';

type Line = Record<string, unknown> & { level: number; msg: string };

/** The real logger's lines, as written, and a wait for the first line that matches. */
class LogCapture implements DestinationStream {
  readonly lines: Line[] = [];
  private waiting: { match: (line: Line) => boolean; resolve: (line: Line) => void }[] = [];

  write(text: string): void {
    for (const raw of text.split('\n').filter(Boolean)) {
      const line = JSON.parse(raw) as Line;
      this.lines.push(line);
      this.waiting = this.waiting.filter((wait) => !(wait.match(line) && (wait.resolve(line), true)));
    }
  }

  next(match: (line: Line) => boolean): Promise<Line> {
    return new Promise((resolve) => this.waiting.push({ match, resolve }));
  }
}

const LEVEL = { debug: 20, info: 30, warn: 40, error: 50 };
const LOOPBACK_EDGE = { host: '127.0.0.1', port: 0, http: { allowedHosts: [], allowedOrigins: [] } };

describe('HTTP logs: access lines at debug, a request summary at info, expected 503s as warnings', function () {
  this.timeout(30_000);

  it('a service at info writes no line per request, and a summary of them by route and status each interval', async () => {
    const capture = new LogCapture();
    const kernel = await openTestKernel({
      logDestination: capture,
      config: {
        log: { level: 'info', requestSummarySeconds: 1 },
        gateway: { port: 0 },
        plugins: [{ resolve: 'tee-none', enabled: true, options: {} }],
      },
    });
    const serving = await serve(kernel, ['gateway']);
    const url = serving.urls.gateway as string;
    try {
      const summary = capture.next((line) => line.msg === 'requests');
      for (let i = 0; i < 3; i++) expect((await fetch(`${url}/health`)).status).to.equal(200);
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`${url}/mcp`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: i, method: 'ping' }),
        });
        expect(res.status).to.equal(200);
      }
      expect((await fetch(`${url}/api/servers/nowhere`)).status).to.equal(404);
      expect((await fetch(`${url}/no/such/route`)).status).to.equal(404);
      // The interval may end among the requests: their counts are then in two summaries.
      const requests: Record<string, Record<string, number>> = {};
      let total = 0;
      for (let line = await summary; ; line = await capture.next((entry) => entry.msg === 'requests')) {
        expect(line).to.include({ level: LEVEL.info, intervalSeconds: 1 });
        total += line.total as number;
        for (const [route, statuses] of Object.entries(
          line.requests as Record<string, Record<string, number>>,
        ))
          for (const [status, count] of Object.entries(statuses))
            (requests[route] ??= {})[status] = (requests[route]?.[status] ?? 0) + count;
        if (total >= 7) break;
      }
      expect(total).to.equal(7);
      expect(requests).to.deep.equal({
        'GET /health': { '200': 3 },
        'POST /mcp': { '200': 2 },
        'GET /api/servers/:id': { '404': 1 },
        'GET unmatched': { '404': 1 },
      });
      expect(capture.lines.filter((entry) => entry.msg === 'request')).to.deep.equal([]);
    } finally {
      await serving.stop();
    }
  });

  it('logs access lines at debug, and the requests since the last summary when the service stops', async () => {
    const capture = new LogCapture();
    const kernel = await openTestKernel({
      logDestination: capture,
      config: { gateway: { port: 0 }, plugins: [{ resolve: 'tee-none', enabled: true, options: {} }] },
    });
    const serving = await serve(kernel, ['gateway']);
    const url = serving.urls.gateway as string;
    expect((await fetch(`${url}/health`, { headers: { 'x-request-id': 'seen-1' } })).status).to.equal(200);
    await serving.stop();
    const access = capture.lines.filter((line) => line.msg === 'request');
    expect(access).to.have.length(1);
    expect(access[0]).to.include({ level: LEVEL.debug, reqId: 'seen-1', path: '/health', status: 200 });
    const summary = capture.lines.find((line) => line.msg === 'requests');
    expect(summary?.requests).to.deep.equal({ 'GET /health': { '200': 1 } });
  });

  it('logs an expected 503 as a warning without a stack, and an unexpected failure as an error with one', async () => {
    const capture = new LogCapture();
    const router = new Router()
      .get('/busy', () => {
        throw new SigilError('unavailable', 'All 32 MCP server slots are busy', { hint: 'Try again' });
      })
      .get('/crash', () => {
        throw new Error('the database went away');
      });
    const http = createHttpApp({
      service: 'test',
      logger: createLogger({ level: 'info', destination: capture }),
      bodyLimitBytes: 1024,
      edge: LOOPBACK_EDGE,
      routers: [router],
      lane: {
        steps: [],
        routes: [
          {
            method: 'POST',
            path: '/lane-busy',
            handle: () => Promise.reject(new SigilError('unavailable', 'The chain cannot be reached now')),
          },
        ],
      },
    });
    const running = await listen(http, '127.0.0.1', 0);
    try {
      const warned = capture.next((line) => line.level === LEVEL.warn);
      expect((await fetch(`${running.url}/busy`)).status).to.equal(503);
      const busy = await warned;
      expect(busy).to.include({ msg: 'request unavailable', code: 'unavailable' });
      expect(busy.error).to.equal('All 32 MCP server slots are busy');
      expect(JSON.stringify(busy)).not.to.include('stack').and.not.include('    at ');

      const warnedOnLane = capture.next((line) => line.level === LEVEL.warn);
      expect((await fetch(`${running.url}/lane-busy`, { method: 'POST' })).status).to.equal(503);
      expect(JSON.stringify(await warnedOnLane))
        .to.include('The chain cannot be reached now')
        .and.not.include('stack');

      const failed = capture.next((line) => line.level === LEVEL.error);
      expect((await fetch(`${running.url}/crash`)).status).to.equal(500);
      const crash = await failed;
      expect(crash.msg).to.equal('request failed');
      expect((crash.err as { stack: string }).stack).to.include('the database went away');
    } finally {
      await running.close(0);
      http.stopLogging();
    }
  });
});
