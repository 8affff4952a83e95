import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Debian's chromium, which the canvas browser-verify node drives. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * The path of chromium, installed with apt-get when missing (as test/support/docker.ts installs the
 * engine: CI runs as root and .ci/run installs it first); a clear failure, never a skip, when it can
 * be neither found nor installed.
 */
export function ensureChromium(): string {
  if (existsSync(CHROMIUM)) return CHROMIUM;
  if (process.getuid?.() !== 0)
    throw new Error(`the browser-verify tests need ${CHROMIUM}: apt-get install chromium (as root)`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '-qq', 'chromium'], { stdio: 'inherit', env });
  if (!existsSync(CHROMIUM)) throw new Error(`apt-get install chromium left no ${CHROMIUM}`);
  return CHROMIUM;
}
