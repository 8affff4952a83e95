import { ensureDebianPrograms } from './debian.ts';

/** Debian's chromium, which the canvas browser-verify node drives. */
export const CHROMIUM = '/usr/bin/chromium';

/** The path of chromium, installed with apt-get when missing (test/support/debian.ts). */
export function ensureChromium(): string {
  ensureDebianPrograms('the browser-verify tests', [[CHROMIUM, 'chromium']]);
  return CHROMIUM;
}
