import { constants } from 'node:fs';
import { access, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { SigilError } from '@sigil/plugin-api';

/** Chromium with nothing of its own going out: no GPU, no background traffic, no updates, no sync. */
const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  // WebRTC would otherwise send UDP past the proxy; this keeps it to TCP through the proxy.
  '--force-webrtc-ip-handling-policy=disable_non_proxied_udp',
];

export interface BrowserSession {
  page: Page;
  context: BrowserContext;
  /** Closes the browser and removes its profile; safe to call more than once. */
  close(): Promise<void>;
}

export interface OpenBrowserOptions {
  executablePath: string;
  /** The allow-list proxy every request of the browser goes through. */
  proxyUrl: string;
  /** Where the temporary profile is made (the OS temp dir by default). */
  profileRoot?: string;
  timeoutMs: number;
}

/** Launches chromium on a fresh temporary profile, removed when the session closes. */
export async function openBrowser(options: OpenBrowserOptions): Promise<BrowserSession> {
  await requireExecutable(options.executablePath);
  const profile = await mkdtemp(join(options.profileRoot ?? tmpdir(), 'sigil-chromium-'));
  let context: BrowserContext;
  try {
    // Imported at the first browser opened, not with the plugin: playwright-core is ~7 MB of
    // JavaScript, 600-750 ms of every `sigil up` that enables this node (issue 30).
    const { chromium } = await import('playwright-core');
    context = await chromium.launchPersistentContext(profile, {
      executablePath: options.executablePath,
      headless: true,
      args: CHROMIUM_FLAGS,
      // The proxy carries loopback too: Playwright adds <-loopback> to the bypass list.
      proxy: { server: options.proxyUrl },
      serviceWorkers: 'block',
      acceptDownloads: false,
      timeout: options.timeoutMs,
      handleSIGINT: false,
      handleSIGTERM: false,
      handleSIGHUP: false,
    });
  } catch (error) {
    await rm(profile, { recursive: true, force: true });
    throw new SigilError('unavailable', `chromium at ${options.executablePath} did not start`, {
      details: { reason: 'browser_launch_failed' },
      cause: error,
    });
  }
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= context
      .close()
      .catch(() => undefined)
      .then(() => rm(profile, { recursive: true, force: true })));
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    return { page, context, close };
  } catch (error) {
    await close();
    throw error;
  }
}

async function requireExecutable(executablePath: string): Promise<void> {
  try {
    await access(executablePath, constants.X_OK);
  } catch {
    throw new SigilError('unavailable', `no chromium at ${executablePath}`, {
      hint: 'install it (apt-get install chromium) or set the plugin option executablePath',
      details: { reason: 'browser_missing', executablePath },
    });
  }
}
