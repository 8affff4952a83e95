import { once } from 'node:events';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { canvasTestContext, describePluginKit, type CanvasTestRecord } from '@sigil/plugin-api/kit';
import * as chromiumPlugin from '../../../plugins/canvas/chromium/index.ts';
import { BrowserVerifyNode, configSchema } from '../../../plugins/canvas/chromium/index.ts';
import { ensureChromium } from '../../support/chromium.ts';
import { rejectionOf } from '../../support/rejection.ts';

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** An HTTP server on loopback that records the path of every request it gets. */
class Site {
  readonly paths: string[] = [];
  private server!: Server;
  origin = '';

  constructor(private readonly handle: (request: IncomingMessage, response: ServerResponse) => void) {}

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      this.paths.push(request.url ?? '');
      this.handle(request, response);
    });
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.origin = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** Resolves with the next request to `path`, once the server has it. */
  nextRequest(path: string): Promise<IncomingMessage> {
    return new Promise((resolve) => {
      const listener = (request: IncomingMessage) => {
        if (request.url !== path) return;
        this.server.off('request', listener);
        resolve(request);
      };
      this.server.on('request', listener);
    });
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

const html = (response: ServerResponse, status: number, body: string) => {
  response.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
  response.end(body);
};

describe('canvas-chromium: the browser-verify node against real chromium and local HTTP servers', function () {
  this.timeout(60_000);
  let executablePath: string;
  /** Where no page may ever be fetched from: any request it gets is a hole in the allow-list. */
  let outside: Site;
  let site: Site;
  let profileRoot: string;

  before(async () => {
    executablePath = ensureChromium();
    outside = await new Site((_, response) => html(response, 200, '<h1>outside</h1>')).start();
    site = await new Site((request, response) => {
      const routes: Record<string, () => void> = {
        '/index.html': () =>
          html(
            response,
            200,
            '<title>Canvas page</title><h1>Hello canvas</h1><p id="hidden" style="display:none">secret</p>',
          ),
        '/missing': () => html(response, 404, '<h1>Not here</h1>'),
        '/redirect-in': () => response.writeHead(302, { location: '/index.html' }).end(),
        '/redirect-out': () => response.writeHead(302, { location: `${outside.origin}/landing` }).end(),
        '/outside-image': () => html(response, 200, `<h1>Image</h1><img src="${outside.origin}/pixel.png">`),
        '/preview/token/index.html': () =>
          html(response, 200, `<h1>Preview</h1><img src="${site.origin}/api/secret.png">`),
        // Never answered: a navigation that hangs until the node is stopped.
        '/hang': () => undefined,
      };
      (routes[request.url ?? ''] ?? (() => html(response, 404, 'no such page')))();
    }).start();
  });

  after(async () => {
    await Promise.all([site?.stop(), outside?.stop()]);
  });

  beforeEach(async () => {
    profileRoot = await mkdtemp(join(tmpdir(), 'sigil-browser-verify-test-'));
    outside.paths.length = 0;
    site.paths.length = 0;
  });

  afterEach(async () => {
    await rm(profileRoot, { recursive: true, force: true });
  });

  const node = (options: Record<string, unknown> = {}) =>
    new BrowserVerifyNode(
      configSchema.parse({
        executablePath,
        allowedOrigins: [site.origin],
        profileRoot,
        navigationTimeoutMs: 10_000,
        ...options,
      }),
    );

  /** Runs `verify` once with `params` (parsed by its schema); its record and outcome. */
  async function run(
    verify: BrowserVerifyNode,
    params: Record<string, unknown>,
    extra: { inputs?: Record<string, unknown>; signal?: AbortSignal; previewUrl?: string } = {},
  ): Promise<{ outcome: Promise<Record<string, unknown>>; record: CanvasTestRecord }> {
    const { context, record, dispose } = await canvasTestContext({
      params: verify.params.parse(params),
      inputs: extra.inputs ?? {},
      ...(extra.signal ? { signal: extra.signal } : {}),
    });
    const withPreview =
      extra.previewUrl === undefined
        ? context
        : { ...context, workspace: { ...context.workspace, previewUrl: extra.previewUrl } };
    const outcome = verify.run(withPreview).finally(dispose);
    // Settled by the test; this keeps an early rejection from counting as unhandled meanwhile.
    outcome.catch(() => undefined);
    return { outcome, record };
  }

  const profilesLeft = () => readdir(profileRoot);

  it('passes every kind of assertion on a served page, renders the url from its input and keeps a real PNG screenshot', async () => {
    const { outcome, record } = await run(
      node(),
      {
        url: '{{inputs.url}}index.html',
        assertions: [
          { status: 200 },
          { selector: 'h1', visible: true },
          { selector: '#hidden', visible: false },
          { selector: '#nowhere', visible: false },
          { text: 'Hello canvas' },
          { title: 'Canvas page' },
        ],
      },
      { inputs: { url: `${site.origin}/` } },
    );
    const outputs = await outcome;
    expect(outputs).to.include({ passed: true, url: `${site.origin}/index.html`, status: 200 });
    expect((outputs.results as { passed: boolean }[]).map((result) => result.passed)).to.deep.equal([
      true,
      true,
      true,
      true,
      true,
      true,
    ]);
    expect(outputs.blocked).to.deep.equal([]);
    const [screenshot] = record.artifacts;
    expect(screenshot).to.include({ name: 'screenshot.png', contentType: 'image/png' });
    expect(outputs.screenshot).to.equal(screenshot?.id);
    expect([...(screenshot?.content.subarray(0, 8) ?? [])]).to.deep.equal(PNG_SIGNATURE);
    expect(screenshot?.bytes).to.be.greaterThan(1_000);
    expect(site.paths).to.deep.equal(['/index.html']);
    expect(await profilesLeft(), 'the temporary profile is removed').to.deep.equal([]);
  });

  it('reports each failed assertion with what the page had, as outputs when onFailure is output', async () => {
    const { outcome, record } = await run(node(), {
      url: `${site.origin}/index.html`,
      onFailure: 'output',
      screenshot: false,
      assertions: [
        { status: 201 },
        { selector: '#nowhere' },
        { selector: '#hidden', visible: true },
        { selector: 'h1', visible: false },
        { selector: 'h1[' },
        { text: 'Goodbye' },
        { title: 'Another page' },
      ],
    });
    const outputs = await outcome;
    expect(outputs.passed).to.equal(false);
    const results = outputs.results as { passed: boolean; actual?: unknown; error?: string }[];
    expect(results.map(({ passed, actual }) => ({ passed, actual }))).to.deep.equal([
      { passed: false, actual: 200 },
      { passed: false, actual: 'absent' },
      { passed: false, actual: 'hidden' },
      { passed: false, actual: 'visible' },
      { passed: false, actual: undefined },
      { passed: false, actual: undefined },
      { passed: false, actual: 'Canvas page' },
    ]);
    expect(results[4]?.error, 'an invalid selector says so').to.be.a('string').and.not.be.empty;
    expect(outputs).to.not.have.property('screenshot');
    expect(record.artifacts).to.deep.equal([]);
  });

  it('fails the node when an assertion fails (by default), with the failures and outputs in the error and the screenshot kept', async () => {
    const { outcome, record } = await run(node(), {
      url: `${site.origin}/missing`,
      assertions: [{ status: 200 }, { text: 'Not here' }],
    });
    const error = await rejectionOf(outcome);
    expect(error.code).to.equal('conflict');
    expect(error.details?.reason).to.equal('assertions_failed');
    expect(error.details?.failures).to.deep.equal([
      { assertion: { status: 200 }, passed: false, actual: 404 },
    ]);
    const outputs = error.details?.outputs as Record<string, unknown>;
    expect(outputs).to.include({ passed: false, status: 404, screenshot: record.artifacts[0]?.id });
    expect(record.artifacts).to.have.length(1);
  });

  it('follows a redirect inside the allow-list', async () => {
    const outputs = await (
      await run(node(), {
        url: `${site.origin}/redirect-in`,
        assertions: [{ status: 200 }],
        screenshot: false,
      })
    ).outcome;
    expect(outputs).to.include({ passed: true, url: `${site.origin}/index.html` });
    expect(site.paths).to.deep.equal(['/redirect-in', '/index.html']);
  });

  it('refuses a redirect to an origin outside the allow-list: that server gets no request', async () => {
    const { outcome, record } = await run(node(), { url: `${site.origin}/redirect-out` });
    const error = await rejectionOf(outcome);
    expect(error.code).to.equal('forbidden');
    expect(error.details).to.deep.equal({ reason: 'navigation_not_allowed', origin: outside.origin });
    expect(outside.paths).to.deep.equal([]);
    expect(record.logs.map((line) => line.data?.destination)).to.include(outside.origin);
  });

  it('refuses a subresource from an origin outside the allow-list: the page loads, that server gets no request', async () => {
    const outputs = await (
      await run(node(), { url: `${site.origin}/outside-image`, assertions: [{ selector: 'h1' }] })
    ).outcome;
    expect(outputs).to.include({ passed: true, status: 200 });
    expect(outputs.blocked).to.deep.equal([outside.origin]);
    expect(outside.paths).to.deep.equal([]);
  });

  it('refuses a url outside the allow-list before starting chromium', async () => {
    const error = await rejectionOf((await run(node(), { url: `${outside.origin}/` })).outcome);
    expect(error.code).to.equal('forbidden');
    expect(error.details).to.deep.equal({ reason: 'origin_not_allowed', origin: outside.origin });
    expect(outside.paths).to.deep.equal([]);
    expect(await profilesLeft(), 'no profile was ever made').to.deep.equal([]);
  });

  it('refuses what the params narrowed away, and params that would widen the operator list', async () => {
    const verify = node({ allowedOrigins: [site.origin, outside.origin] });
    const widened = node().params.safeParse({ url: `${site.origin}/`, allowedOrigins: [outside.origin] });
    expect(widened.success).to.equal(false);
    expect(widened.error?.issues.map((issue) => issue.path)).to.deep.equal([['allowedOrigins', 0]]);
    const error = await rejectionOf(
      (await run(verify, { url: `${outside.origin}/`, allowedOrigins: [site.origin] })).outcome,
    );
    expect(error.details?.reason).to.equal('origin_not_allowed');
    expect(outside.paths).to.deep.equal([]);
  });

  it('has an optional input after of any type, only to wait for another node', () => {
    const { inputs } = node().ports();
    expect(inputs.after).to.include({ type: 'json', required: false });
    expect(inputs.url).to.include({ type: 'string', required: false });
  });

  it("opens the run's preview with no origin allowed, and nothing of its origin outside the preview", async () => {
    const { outcome } = await run(
      node({ allowedOrigins: [] }),
      { url: '{{workspace.previewUrl}}index.html', assertions: [{ text: 'Preview' }] },
      // A push it waited for: the value on after changes nothing of the check.
      { previewUrl: `${site.origin}/preview/token/`, inputs: { after: { commit: 'f'.repeat(40) } } },
    );
    const outputs = await outcome;
    expect(outputs).to.include({ passed: true, status: 200 });
    expect(outputs.blocked).to.deep.equal([site.origin]);
    expect(site.paths).to.deep.equal(['/preview/token/index.html']);
  });

  it('refuses a url template that reads anything but inputs.url and workspace.previewUrl, and credentials in the url', async () => {
    const verify = node();
    for (const url of ['{{inputs.other}}', '{{constructor.constructor}}', '{{workspace.dir}}'])
      expect(verify.params.safeParse({ url }).success, url).to.equal(false);
    const error = await rejectionOf(
      (await run(verify, { url: `http://user:pw@${site.origin.slice('http://'.length)}/` })).outcome,
    );
    expect(error.details).to.deep.equal({ reason: 'url_credentials' });
    expect(JSON.stringify(error.details)).to.not.include('pw');
  });

  it('stops when the signal aborts, rejecting with its reason, and closes chromium and removes its profile', async () => {
    const controller = new AbortController();
    const hanging = site.nextRequest('/hang');
    const { outcome } = await run(node(), { url: `${site.origin}/hang` }, { signal: controller.signal });
    const request = await hanging;
    const reason = new Error('cancelled by the owner');
    const upstreamClosed = once(request.socket, 'close');
    controller.abort(reason);
    const error = await outcome.then(
      () => undefined,
      (rejected: unknown) => rejected,
    );
    expect(error).to.equal(reason);
    await upstreamClosed;
    expect(await profilesLeft()).to.deep.equal([]);
  });

  it('fails with navigation_timeout when the page does not load in time', async () => {
    const error = await rejectionOf(
      (await run(node({ navigationTimeoutMs: 1_000 }), { url: `${site.origin}/hang` })).outcome,
    );
    expect(error.code).to.equal('unavailable');
    expect(error.details?.reason).to.equal('navigation_timeout');
    expect(await profilesLeft()).to.deep.equal([]);
  });

  it('says clearly how to install chromium when it is missing', async () => {
    const error = await rejectionOf(
      (await run(node({ executablePath: '/nonexistent/chromium' }), { url: `${site.origin}/index.html` }))
        .outcome,
    );
    expect(error.code).to.equal('unavailable');
    expect(error.details).to.deep.equal({
      reason: 'browser_missing',
      executablePath: '/nonexistent/chromium',
    });
    expect(error.hint).to.include('apt-get install chromium');
  });
});

// Not a writes node, and it is given no secret.
describePluginKit(
  chromiumPlugin,
  { executablePath: '/usr/bin/chromium' },
  {
    expectNotApplicable: [
      'canvas-node.writes-need-approval',
      'canvas-node.writes-once',
      'canvas-node.no-secret',
    ],
  },
);
