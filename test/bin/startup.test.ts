import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { ENVELOPE } from '../../core/mcp/era.ts';
import { RECORD_LOADS } from '../support/build.ts';
import { startSigil } from '../support/cli.ts';
import { repoPath } from '../support/paths.ts';

/**
 * What `sigil gateway` loads before it serves (issue 30, start-up): only what a request needs. The
 * runtime service and the dev chain are imported by the commands that use them (`sigil up`, `sigil
 * runtime`), npm's installer libraries when a package is first resolved or installed, jose at the
 * first token signed or verified, the ERC-8128 library at the first signed request, viem at the first
 * address checksummed or signature checked (core/chain/viem.ts), so a resolve hook recording every
 * module the process loads must not see them by the time the gateway has answered an anonymous
 * request; nor prom-client by the time it listens (imported at the first request counted). Nor do the
 * gateway's or the runtime's modules import the MCP SDK client (~120 ms of a start: imported by the
 * first server start or tool session, or in the background once the gateway listens), awilix's module loader (fast-glob and its
 * dependencies, ~40 ms, which Sigil never uses) or x402's header codecs (~55 ms with the zod 3 they
 * bring; imported by the first payment header); nor does the browser-verify canvas node import
 * Playwright (600-750 ms of `sigil up`) before it opens its first browser, nor the OpenAI-compatible
 * providers' stream the OpenAI SDK (~120 ms), nor the Anthropic provider its SDK, before its first request. `sigil up` without a chain
 * loads no viem at all (~470 modules with x402's EVM scheme and noble, ~300 ms of its start): the
 * ledger checksums with ox, and the chain, deposit keys, dev chain, chat payer and operator signer
 * load when configured or first used.
 */
describe('sigil gateway start-up', function () {
  this.timeout(60_000);
  let dir: string;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-startup-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** `sigil <command>` on the embedded defaults, every module it loads recorded in `file`; resolves once serving. */
  async function startRecorded(command: 'gateway' | 'up', env: Record<string, string>) {
    const file = join(dir, 'loaded');
    const running = await startSigil([command], /^gateway\s+http:\/\/\S+\n/m, {
      nodeArgs: ['--import', pathToFileURL(RECORD_LOADS).href],
      cwd: dir,
      env: {
        SIGIL_CONFIG: '',
        DATABASE_URL: join(dir, 'sigil.db'),
        GATEWAY_PORT: '0',
        GATEWAY_WARMUP: 'false',
        SIGIL_LOADED_FILE: file,
        ...env,
      },
    });
    return { file, running };
  }

  it('serves without loading the runtime, the dev chain, npm’s installer libraries, jose or viem, and listens before loading prom-client', async () => {
    const { file, running } = await startRecorded('gateway', {});
    const loadedBeforeListening = readFileSync(file, 'utf8');
    try {
      const url = /gateway\s+(http:\/\/\S+)\n/.exec(running.output())?.[1] as string;
      const listed = await fetch(`${url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      expect(listed.status).to.equal(200);
      // Counted, though it finished before prom-client was loaded.
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(metrics).to.match(/http_requests_total\{method="POST",[^}]*status="200"[^}]*\} 1\n/);
    } finally {
      running.child.kill('SIGTERM');
      expect(await running.exited).to.equal(0);
    }
    const loaded = readFileSync(file, 'utf8').trim().split('\n');
    // The recording works: the gateway's own modules and the default registry plugin are in it.
    expect(loaded.some((url) => url.endsWith('/services/gateway/app.ts'))).to.equal(true);
    expect(loaded.some((url) => url.endsWith('/registries/npm/npm.ts'))).to.equal(true);
    const unwanted = [
      /\/services\/runtime\/app\.ts$/,
      /\/devchain\/(?!config\.ts$|quick-start\.ts$)/, // the config's schema and the banner's text are not the chain
      /\/node_modules\/@npmcli\/arborist\//,
      /\/node_modules\/pacote\//,
      // Imported at the first address checksummed or signature checked (core/chain/viem.ts).
      /\/node_modules\/viem\//,
      // Required when first used: a pretty log, a request reaching Koa (tools/call takes the lane).
      /\/node_modules\/pino-pretty\//,
      /\/node_modules\/@koa\/bodyparser\//,
      // Imported at the first token signed or verified (core/auth/jose.ts): an anonymous call needs none.
      /\/node_modules\/jose\//,
      // Imported at the first ERC-8128 signed request (core/auth/erc8128.ts).
      /\/node_modules\/@slicekit\/erc8128\//,
    ];
    expect(loaded.filter((url) => unwanted.some((pattern) => pattern.test(url)))).to.deep.equal([]);
    expect(loadedBeforeListening).not.to.match(/\/node_modules\/prom-client\//);
  });

  it('`sigil up` without a chain is healthy without loading viem, x402’s clients or the ERC-8128 signer', async () => {
    const { file, running } = await startRecorded('up', { RUNTIME_PORT: '0', DEV_CHAIN: 'false' });
    try {
      const urls = ['runtime', 'gateway'].map(
        (name) => new RegExp(`^${name}\\s+(http://\\S+)$`, 'm').exec(running.output())?.[1] as string,
      );
      for (const url of urls) expect((await fetch(`${url}/health`)).status, url).to.equal(200);
    } finally {
      running.child.kill('SIGTERM');
      expect(await running.exited).to.equal(0);
    }
    const loaded = readFileSync(file, 'utf8').trim().split('\n');
    // The recording works: the runtime's ledger is in it, and the address checksums it uses.
    expect(loaded.some((url) => url.endsWith('/services/runtime/ledger/ledger.ts'))).to.equal(true);
    expect(loaded.some((url) => /\/node_modules\/ox\/_esm\/core\/Address\.js$/.test(url))).to.equal(true);
    const unwanted = [
      // The ledger's chain, the deposit keys and the dev chain: imported only when configured.
      /\/node_modules\/viem\//,
      /\/devchain\/(?!config\.ts$|quick-start\.ts$|skip\.ts$)/,
      // The chat's payer (x402's client and EVM scheme): imported by the first session that may pay.
      /\/node_modules\/@x402\//,
      // The operator path's signer: imported by its first request.
      /\/node_modules\/@slicekit\/erc8128\//,
    ];
    expect(loaded.filter((url) => unwanted.some((pattern) => pattern.test(url)))).to.deep.equal([]);
  });

  it('the gateway’s, the runtime’s, the browser node’s, the OpenAI stream’s and the Anthropic provider’s modules import neither the MCP SDK client, awilix’s module loader, x402’s codecs, Playwright nor the OpenAI or Anthropic SDK', async () => {
    const file = join(dir, 'loaded');
    const modules = [
      'bin/run-services.ts',
      'services/serve.ts',
      'services/gateway/app.ts',
      'services/runtime/app.ts',
      'plugins/canvas/chromium/index.ts',
      'packages/plugin-api/src/llm/openai.ts',
      'providers/anthropic/index.ts',
    ];
    const imports = modules.map(
      (module) => `await import(${JSON.stringify(pathToFileURL(repoPath(module)).href)});`,
    );
    await promisify(execFile)(
      process.execPath,
      [
        '--import',
        pathToFileURL(RECORD_LOADS).href,
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        imports.join(''),
      ],
      { cwd: repoPath(), env: { ...process.env, SIGIL_LOADED_FILE: file } },
    );
    const loaded = readFileSync(file, 'utf8').trim().split('\n');
    expect(loaded.some((url) => url.endsWith('/services/gateway/launcher.ts'))).to.equal(true);
    expect(loaded.some((url) => url.endsWith('/node_modules/awilix/lib/awilix.browser.mjs'))).to.equal(true);
    const unwanted = [
      /\/node_modules\/@modelcontextprotocol\/client\//,
      /\/node_modules\/fast-glob\//,
      // x402's header codecs: imported when a payment header is first read or written.
      /\/node_modules\/@x402\/core\//,
      // The browser-verify node's Playwright (~7 MB): imported by the first browser it opens.
      /\/node_modules\/playwright-core\//,
      // The OpenAI SDK of the OpenAI-compatible providers, Anthropic's of its provider: imported by
      // their first request.
      /\/node_modules\/openai\//,
      /\/node_modules\/@anthropic-ai\/sdk\//,
    ];
    expect(loaded.filter((url) => unwanted.some((pattern) => pattern.test(url)))).to.deep.equal([]);
  });

  it('names the 2026 envelope’s `_meta` keys as the MCP SDK client does', async () => {
    const client = await import('@modelcontextprotocol/client');
    expect(ENVELOPE).to.deep.equal({
      protocolVersion: client.PROTOCOL_VERSION_META_KEY,
      clientCapabilities: client.CLIENT_CAPABILITIES_META_KEY,
      clientInfo: client.CLIENT_INFO_META_KEY,
      logLevel: client.LOG_LEVEL_META_KEY,
      serverInfo: client.SERVER_INFO_META_KEY,
    });
  });
});
