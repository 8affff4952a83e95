import { definePlugin, extensionPoints, provide } from '@sigil/plugin-api';
import { configSchema } from './config.ts';
import { BrowserVerifyNode } from './node.ts';

/**
 * The `browser-verify` canvas node: opens a page with playwright-core driving Debian's chromium,
 * checks assertions on it and stores a screenshot, reaching only allow-listed origins. See README.md.
 */
export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-chromium',
  specVersion: 'v2',
  description: 'Canvas node browser-verify: checks a page in headless chromium and keeps a screenshot',
  config: configSchema,
  provides: [provide(extensionPoints.canvasNodeKinds, 'browser-verify')],
  create: ({ config }) => new BrowserVerifyNode(config),
});

export { configSchema, BrowserVerifyNode };
export type { BrowserVerifyConfig } from './config.ts';
export type { BrowserVerifyParams } from './params.ts';
