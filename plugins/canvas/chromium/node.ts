import {
  SigilError,
  type CanvasNodeContextV2,
  type CanvasNodeV2,
  type CanvasPortsV2,
} from '@sigil/plugin-api';
import { afterInput, renderTemplate } from '@sigil/plugin-api/canvas';
import { AllowList } from './allow-list.ts';
import { checkAssertions, type AssertionResult } from './assertions.ts';
import { openBrowser, type BrowserSession } from './browser.ts';
import type { BrowserVerifyConfig } from './config.ts';
import { deadline } from './deadline.ts';
import {
  destinationOf,
  mainFrameNavigations,
  navigate,
  notAllowed,
  routeThroughAllowList,
} from './navigation.ts';
import { paramsSchema, type BrowserVerifyParams } from './params.ts';
import { AllowListProxy } from './proxy.ts';

type Context = CanvasNodeContextV2<BrowserVerifyParams>;

const PORTS: CanvasPortsV2 = {
  inputs: {
    url: { type: 'string', required: false, description: 'What the url template reads as {{inputs.url}}' },
    ...afterInput('Any output of the node the check must wait for (a push): its value is not used'),
  },
  outputs: {
    passed: { type: 'boolean', description: 'Whether every assertion held' },
    results: { type: 'array', description: 'Each assertion with passed, and what the page had (actual)' },
    url: { type: 'string', description: 'The URL the page ended on, after redirects' },
    status: { type: 'number', description: "The page's HTTP status" },
    screenshot: { type: 'string', required: false, description: "The screenshot's artifact id" },
    blocked: { type: 'array', description: 'Origins the page tried to reach and was refused' },
  },
};

/** `browser-verify`: opens a page in chromium, checks assertions on it, keeps a screenshot. */
export class BrowserVerifyNode implements CanvasNodeV2<BrowserVerifyParams> {
  readonly specVersion = 'v2';
  readonly nodeKind = 'browser-verify';
  readonly description =
    'Opens a page in headless chromium (allow-listed origins only), checks its status, selectors and text, and stores a screenshot';
  readonly effect = 'reads';
  readonly params;
  readonly example = {
    params: {
      url: '{{workspace.previewUrl}}index.html',
      assertions: [{ status: 200 }, { selector: 'h1', visible: true }, { text: 'Hello' }],
    },
    inputs: {},
    workspaceFiles: [{ path: 'index.html', content: '<!doctype html><title>Hello</title><h1>Hello</h1>' }],
  };

  constructor(private readonly config: BrowserVerifyConfig) {
    this.params = paramsSchema(config);
  }

  ports(): CanvasPortsV2 {
    return PORTS;
  }

  async run(context: Context): Promise<Record<string, unknown>> {
    context.signal.throwIfAborted();
    const allowList = new AllowList(
      context.params.allowedOrigins ?? this.config.allowedOrigins,
      context.workspace.previewUrl,
    );
    const url = targetUrl(context, allowList);
    const stop = deadline(context.signal, this.config.timeoutMs);
    try {
      return await this.verify(context, url, allowList, stop.signal);
    } finally {
      stop.dispose();
    }
  }

  /** Starts the proxy and chromium, checks the page, and closes both however it ends (`stop` included). */
  private async verify(
    context: Context,
    url: URL,
    allowList: AllowList,
    stop: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const proxy = new AllowListProxy(allowList);
    let session: BrowserSession | undefined;
    let closing: Promise<void> | undefined;
    const shutdown = () => (closing ??= Promise.all([session?.close(), proxy.close()]).then(() => undefined));
    stop.addEventListener('abort', () => void shutdown(), { once: true });
    try {
      const proxyUrl = await proxy.listen();
      context.log('starting chromium', { origin: url.origin });
      session = await openBrowser({
        executablePath: this.config.executablePath,
        proxyUrl,
        timeoutMs: this.config.timeoutMs,
        ...(this.config.profileRoot ? { profileRoot: this.config.profileRoot } : {}),
      });
      stop.throwIfAborted();
      const outputs = await this.checkPage(context, session, url, allowList);
      stop.throwIfAborted();
      return await keepScreenshot(context, outputs);
    } catch (error) {
      throw stop.aborted ? stop.reason : error;
    } finally {
      await shutdown();
    }
  }

  /** Opens the page inside the allow-list and checks the assertions: the outputs, screenshot bytes aside. */
  private async checkPage(
    context: Context,
    { page, context: browser }: BrowserSession,
    url: URL,
    allowList: AllowList,
  ): Promise<PageOutcome> {
    const refused = new Set<string>();
    const refuse = (destination: string) => {
      if (refused.has(destination)) return;
      refused.add(destination);
      context.log('refused a request of the page outside the allow-list', { destination });
    };
    browser.on('request', (request) => {
      if (!allowList.allows(request.url())) refuse(destinationOf(request.url()));
    });
    await routeThroughAllowList(browser, allowList, refuse);
    const navigations = mainFrameNavigations(page);
    const leftAllowList = () => {
      const outside = navigations.find((visited) => !allowList.allows(visited));
      return outside === undefined ? undefined : notAllowed(outside, 'navigation_not_allowed');
    };
    const status = await navigate(page, url, context.params, this.config).catch((error: unknown) => {
      throw leftAllowList() ?? error;
    });
    const left = leftAllowList();
    if (left) throw left;
    const results = await checkAssertions(page, status, context.params.assertions);
    return {
      outputs: { passed: results.every((result) => result.passed), results, url: page.url(), status },
      refused,
      screenshot: context.params.screenshot ? await page.screenshot() : undefined,
    };
  }
}

interface PageOutcome {
  outputs: { passed: boolean; results: AssertionResult[]; url: string; status: number };
  refused: ReadonlySet<string>;
  screenshot: Buffer | undefined;
}

/**
 * Stores the screenshot, then resolves to the outputs, or, when an assertion failed and `onFailure`
 * is `fail`, rejects with them (the screenshot stays stored, for the owner to look at).
 */
async function keepScreenshot(
  context: Context,
  { outputs: checked, refused, screenshot }: PageOutcome,
): Promise<Record<string, unknown>> {
  const artifact = screenshot && (await context.artifacts.put('screenshot.png', 'image/png', screenshot));
  const outputs = { ...checked, blocked: [...refused], ...(artifact ? { screenshot: artifact.id } : {}) };
  const failures = checked.results.filter((result) => !result.passed);
  context.log(checked.passed ? 'every assertion held' : `${failures.length} assertion(s) failed`, {
    status: checked.status,
  });
  if (!checked.passed && context.params.onFailure === 'fail')
    throw new SigilError('conflict', `${failures.length} of ${checked.results.length} assertions failed`, {
      details: { reason: 'assertions_failed', failures, outputs },
    });
  return outputs;
}

/** The rendered `url` param, refused before anything starts when it is not allowed. */
function targetUrl(context: Context, allowList: AllowList): URL {
  const previewUrl = context.workspace.previewUrl;
  const rendered = renderTemplate(context.params.url, {
    inputs: context.inputs,
    workspace: previewUrl === undefined ? {} : { previewUrl },
  });
  let url: URL;
  try {
    url = new URL(rendered);
  } catch {
    throw new SigilError('invalid_request', 'The url param does not make an absolute URL', {
      details: { reason: 'invalid_url' },
    });
  }
  if (url.username !== '' || url.password !== '')
    throw new SigilError('invalid_request', 'The URL carries credentials, which the node does not send', {
      details: { reason: 'url_credentials' },
    });
  if (!allowList.allows(url.href)) throw notAllowed(url.href, 'origin_not_allowed');
  return url;
}
