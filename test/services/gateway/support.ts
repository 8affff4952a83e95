import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as HttpTransportV2,
} from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { LocalAccount } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { SigilConfig } from '../../../services/config.ts';
import { serve, type Serving } from '../../../services/serve.ts';
import { freePort, parseBanner, startSigil } from '../../support/cli.ts';
import {
  openTestKernel,
  type ConfigOverrides,
  type TestDatabase,
  type TestKernelOptions,
} from '../../support/kernel.ts';
import { EVERYTHING } from '../../registries/npm/support.ts';
import { startVerdaccio, type PackageSource, type Verdaccio } from '../../support/verdaccio.ts';
import { fixturePath } from '../../support/paths.ts';
import { ENVELOPE, MODERN_REVISION } from '../../../core/mcp/era.ts';

const fixtures = fixturePath('mcp');
/** A small real MCP stdio server (echo, instance, sleep, …) that the tests install as a package. */
export const probePackage = join(fixtures, 'probe-package');
/** A server that leaks its secret CANARY_SECRET in every encoding and answers what proofs cannot hold. */
export const hostilePackage = join(fixtures, 'hostile-package');
/**
 * A small real MCP stdio server on the SDK v2 (2026-07-28 first, 2025-11-25 to a client that opens with
 * `initialize`): echo, instance, envelope, progress, greet (input_required), crash.
 */
export const modernEchoPackage = join(fixtures, 'modern-echo-package');

/** The modern echo server's catalog entry (id `modern`): publish `modernEchoPackage` for it. */
export const modernEchoEntry = {
  id: 'modern',
  title: 'Modern echo',
  registry: 'npm',
  package: '@sigil-test/modern-echo-server',
  version: '^1.0.0',
  entry: { bin: 'sigil-modern-echo' },
  smokeTest: { tool: 'echo', arguments: { message: 'warm' } },
  // Its one piece of state is an id per process, which says nothing of any caller.
  stateless: true,
};

/** A JSON-RPC answer of the MCP endpoint, as a test reads it. */
export type JsonRpcAnswer = {
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
};

export const textOf = (result: unknown): string =>
  ((result as CallToolResult).content[0] as { text: string }).text;

/** The hostile server's catalog entry: it records each call of `record`, so a test sees whether one ran. */
export const hostileEntry = {
  id: 'hostile',
  title: 'Hostile',
  registry: 'npm',
  package: '@sigil-test/hostile-server',
  version: '^1.0.0',
  entry: { bin: 'sigil-hostile' },
  secrets: [{ name: 'CANARY_SECRET', required: false }],
};

/** The MCP reference server's catalog entry, as the default catalog runs it (publish EVERYTHING for it). */
export const everythingEntry = {
  id: 'everything',
  title: 'Everything',
  registry: 'npm',
  package: EVERYTHING.name,
  version: EVERYTHING.version,
  entry: { bin: 'mcp-server-everything', args: ['stdio'] },
  smokeTest: { tool: 'echo', arguments: { message: 'warm' } },
};

/** The probe MCP server's catalog entry (without its id): the package the tests publish to verdaccio. */
export const probeEntry = {
  title: 'Probe',
  registry: 'npm',
  package: '@sigil-test/probe-server',
  version: '^1.0.0',
  entry: { bin: 'sigil-probe' },
  smokeTest: { tool: 'echo', arguments: { message: 'warm' } },
  // Its one piece of state is an id per process, which says nothing of any caller.
  stateless: true,
};

/**
 * The probe MCP server published to a real npm registry (verdaccio), and gateways that install it
 * with the registry-npm plugin and run it in the linux-namespaces sandbox. Catalog: `probe` (an
 * optional secret PROBE_TOKEN) and `probe-locked` (the same package, PROBE_TOKEN required).
 */
export class ProbeWorld {
  private constructor(
    readonly registry: Verdaccio,
    readonly dir: string,
    readonly catalogFile: string,
  ) {}

  /** `more`: further packages to publish (directories, or public specs), and their catalog entries. */
  static async start(
    more: { packages?: (string | PackageSource)[]; servers?: Record<string, unknown>[] } = {},
  ): Promise<ProbeWorld> {
    const registry = await startVerdaccio({
      packages: [probePackage, ...(more.packages ?? [])].map((source) =>
        typeof source === 'string' ? { dir: source } : source,
      ),
    });
    // Not under /tmp: the sandbox mounts a private /tmp; and the sandbox user must reach the cache.
    const dir = mkdtempSync(join('/var/tmp', 'sigil-gw-'));
    chmodSync(dir, 0o755);
    const catalogFile = join(dir, 'catalog.json');
    writeFileSync(
      catalogFile,
      JSON.stringify({
        servers: [
          { id: 'probe', ...probeEntry, secrets: [{ name: 'PROBE_TOKEN', required: false }] },
          { id: 'probe-locked', ...probeEntry, secrets: [{ name: 'PROBE_TOKEN', required: true }] },
          ...(more.servers ?? []),
        ],
      }),
    );
    return new ProbeWorld(registry, dir, catalogFile);
  }

  async stop(): Promise<void> {
    await this.registry.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** The plugins of a gateway that installs the probe package from this world's registry. */
  plugins(sandboxStateDir = join(this.dir, 'sandboxes')): SigilConfig['plugins'] {
    return [
      { resolve: 'tee-none', enabled: true, options: {} },
      {
        resolve: 'registry-npm',
        enabled: true,
        options: {
          registry: this.registry.url,
          cacheDir: join(this.dir, 'packages'),
        },
      },
      { resolve: 'sandbox-linux-namespaces', enabled: true, options: { stateDir: sandboxStateDir } },
    ];
  }

  /**
   * `sigil up`, the real command, on this world's catalog and plugins with the dev chain, resolved
   * once its output matches `ready`; its dev chain block parsed.
   */
  async sigilUp(ready: RegExp, options: { warmupAtStart?: boolean; timeoutMs?: number } = {}) {
    const dir = join(this.dir, 'up');
    mkdirSync(dir);
    writeFileSync(
      join(dir, 'sigil.config.json'),
      JSON.stringify({
        gateway: {
          includeDefaultCatalog: false,
          catalogFile: this.catalogFile,
          warmupAtStart: options.warmupAtStart ?? false,
        },
        plugins: this.plugins(join(dir, 'sandboxes')),
      }),
    );
    const [gatewayPort, runtimePort] = [await freePort(), await freePort()];
    const up = await startSigil(['up'], ready, {
      cwd: dir,
      env: {
        SIGIL_CONFIG: '',
        DATABASE_URL: join(dir, 'sigil.db'),
        RUNTIME_PORT: String(runtimePort),
        GATEWAY_PORT: String(gatewayPort),
        DEV_CHAIN: '',
        DEV_CHAIN_PORT: '',
      },
      timeoutMs: options.timeoutMs ?? 60_000,
    });
    return {
      up,
      banner: parseBanner(up.output()),
      gatewayUrl: `http://127.0.0.1:${gatewayPort}`,
      runtimeUrl: `http://127.0.0.1:${runtimePort}`,
    };
  }

  /** A gateway on a fresh (or given) database with the probe catalog and real plugins. */
  async gateway(
    database: TestDatabase | undefined,
    gateway: ConfigOverrides['gateway'] = {},
    extra: Omit<TestKernelOptions, 'database' | 'config'> & {
      vault?: SigilConfig['vault'];
      /** More plugins, e.g. a payment rail. */
      plugins?: SigilConfig['plugins'];
      /** A tee-backend plugin instead of tee-none. */
      tee?: SigilConfig['plugins'][number];
      /** A sandbox-runtime plugin instead of sandbox-linux-namespaces. */
      sandbox?: SigilConfig['plugins'][number];
      /** database.dataKey (SIGIL_DATA_KEY): what the database keeps sealed at rest. */
      dataKey?: string;
      /** More of the database section (replicas: `shared`, heartbeats, leases). */
      database?: ConfigOverrides['database'];
    } = {},
  ): Promise<Serving & { url: string }> {
    const { vault, plugins = [], tee, sandbox, dataKey, database: replicas, ...kernelOptions } = extra;
    const replacements: Record<string, SigilConfig['plugins'][number] | undefined> = {
      'tee-none': tee,
      'sandbox-linux-namespaces': sandbox,
    };
    const kernel = await openTestKernel({
      ...kernelOptions,
      ...(database ? { database } : {}),
      config: {
        gateway: { port: 0, includeDefaultCatalog: false, catalogFile: this.catalogFile, ...gateway },
        ...(vault ? { vault } : {}),
        ...(dataKey || replicas ? { database: { ...replicas, ...(dataKey ? { dataKey } : {}) } } : {}),
        plugins: [...this.plugins().map((plugin) => replacements[plugin.resolve] ?? plugin), ...plugins],
      },
    });
    const serving = await serve(kernel, ['gateway']);
    return { ...serving, url: serving.urls.gateway as string };
  }
}

/** Signs a wallet in (SIWE; a fresh one unless given) and creates a wallet token for it (its id, and the session JWT). */
export async function walletToken(
  gatewayUrl: string,
  wallet: LocalAccount = privateKeyToAccount(generatePrivateKey()),
): Promise<{ token: string; address: string; id: string; jwt: string }> {
  const challenge = (await (
    await fetch(`${gatewayUrl}/api/auth/challenge?address=${wallet.address}`)
  ).json()) as { message: string };
  const verified = await fetch(`${gatewayUrl}/api/auth/verify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      message: challenge.message,
      signature: await wallet.signMessage({ message: challenge.message }),
    }),
  });
  const { token: jwt } = (await verified.json()) as { token: string };
  const created = await fetch(`${gatewayUrl}/api/auth/create-token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${jwt}` },
    body: '{}',
  });
  const { token, id } = (await created.json()) as { token: string; id: string };
  return { token, address: wallet.address, id, jwt };
}

export async function mcpClient(url: string, token?: string, session?: string): Promise<Client> {
  const headers: Record<string, string> = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (session) headers['x-mcp-session'] = session;
  const client = new Client({ name: 'sigil-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

/**
 * An SDK v2 client (`@modelcontextprotocol/client`) connected at MCP 2026-07-28 (pinned: no fallback
 * to `initialize`), or as `'auto'` negotiates.
 */
export async function mcpClientV2(
  url: string,
  token?: string,
  session?: string,
  mode: 'auto' | { pin: string } = { pin: MODERN_REVISION },
): Promise<ClientV2> {
  const headers: Record<string, string> = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (session) headers['x-mcp-session'] = session;
  const client = new ClientV2({ name: 'sigil-test-v2', version: '1.0.0' }, { versionNegotiation: { mode } });
  await client.connect(new HttpTransportV2(new URL(url), { requestInit: { headers } }));
  return client;
}

export { MODERN_REVISION };

/** The `_meta` envelope of a 2026-07-28 request (`extra`: more keys, e.g. a payment or a log level). */
export const modernMeta = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  [ENVELOPE.protocolVersion]: MODERN_REVISION,
  [ENVELOPE.clientCapabilities]: {},
  [ENVELOPE.clientInfo]: { name: 'sigil-test', version: '1.0.0' },
  ...extra,
});

/**
 * A 2026-07-28 request POSTed to `url` as an SDK v2 client sends it: the envelope in `params._meta`
 * (`meta`: more keys) and the standard headers (`headers` may override or, as '', drop one).
 */
export function postModern(
  url: string,
  message: { id?: number | string; method: string; params?: Record<string, unknown> },
  options: { meta?: Record<string, unknown>; headers?: Record<string, string> } = {},
) {
  const params = message.params ?? {};
  const name = typeof params.name === 'string' ? params.name : undefined;
  const standard = Object.fromEntries(
    Object.entries({
      'mcp-protocol-version': MODERN_REVISION,
      'mcp-method': message.method,
      ...(name !== undefined && { 'mcp-name': name }),
      ...options.headers,
    }).filter(([, value]) => value !== ''),
  );
  return postMcp(
    url,
    JSON.stringify({
      jsonrpc: '2.0',
      id: message.id ?? 1,
      method: message.method,
      params: { ...params, _meta: { ...(params._meta as object), ...modernMeta(options.meta) } },
    }),
    standard,
  );
}

/** A JSON-RPC message POSTed to the MCP endpoint at `url` (`…/mcp`), as an MCP client sends it. */
export const postMcp = (url: string, body: string, headers: Record<string, string> = {}) =>
  fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body,
  });
