import type { BrowserContext, Page, Response } from 'playwright-core';
import { SigilError } from '@sigil/plugin-api';
import { originOf, type AllowList } from './allow-list.ts';
import type { BrowserVerifyConfig } from './config.ts';
import type { BrowserVerifyParams } from './params.ts';

/** How the page is opened inside the allow-list, and what leaving it means. */

/** `origin_not_allowed`: the URL the node was given; `navigation_not_allowed`: a redirect or a script's. */
export function notAllowed(url: string, reason: 'origin_not_allowed' | 'navigation_not_allowed'): SigilError {
  const parsed = new URL(url);
  const origin = originOf(parsed) ?? parsed.protocol;
  return new SigilError('forbidden', `${origin} is not on the browser-verify allow-list`, {
    hint: "add the origin to the plugin option allowedOrigins, or open the run's preview ({{workspace.previewUrl}})",
    details: { reason, origin },
  });
}

/** What the `blocked` output says of a refused URL: its origin (its scheme, for one with none). */
export const destinationOf = (url: string) => originOf(new URL(url)) ?? new URL(url).protocol;

/**
 * The first line of the allow-list, for requests the page makes itself (its proxy also checks every
 * redirect hop, which routes never see, and chromium's own requests). A refused request fails as
 * blocked by the client; a refused WebSocket is closed (it is not a `request`, so it is reported here).
 */
export async function routeThroughAllowList(
  browser: BrowserContext,
  allowList: AllowList,
  refuse: (destination: string) => void,
): Promise<void> {
  await browser.route('**/*', (route) =>
    allowList.allows(route.request().url()) ? route.continue() : route.abort('blockedbyclient'),
  );
  await browser.routeWebSocket(
    () => true,
    (socket) => {
      if (allowList.allows(socket.url())) return socket.connectToServer();
      refuse(destinationOf(socket.url()));
      return socket.close();
    },
  );
}

/** URLs the main frame is asked to load from now on, every redirect hop included. */
export function mainFrameNavigations(page: Page): string[] {
  const visited: string[] = [];
  page.on('request', (request) => {
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) visited.push(request.url());
  });
  return visited;
}

/** Opens the page and resolves to its status, or explains why it could not be loaded. */
export async function navigate(
  page: Page,
  url: URL,
  params: BrowserVerifyParams,
  config: BrowserVerifyConfig,
): Promise<number> {
  let response: Response | null;
  try {
    response = await page.goto(url.href, {
      waitUntil: params.waitUntil,
      timeout: config.navigationTimeoutMs,
    });
  } catch (error) {
    const { errors } = await import('playwright-core'); // loaded by the browser's launch (browser.ts)
    if (error instanceof errors.TimeoutError)
      throw new SigilError('unavailable', `the page did not load within ${config.navigationTimeoutMs} ms`, {
        details: { reason: 'navigation_timeout', timeoutMs: config.navigationTimeoutMs },
      });
    const netError = /net::ERR_[A-Z_]+/.exec(error instanceof Error ? error.message : '')?.[0];
    throw new SigilError('unavailable', `the page could not be loaded (${netError ?? 'no network error'})`, {
      details: { reason: 'navigation_failed', ...(netError ? { error: netError } : {}) },
      cause: error,
    });
  }
  if (response === null)
    throw new SigilError('unavailable', 'the page loaded without an HTTP response', {
      details: { reason: 'navigation_failed' },
    });
  return response.status();
}
