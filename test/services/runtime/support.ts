import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import type { PrivateKeyAccount } from 'viem/accounts';
import { ManualClock } from '../../../core/clock.ts';
import type { PluginEntry } from '../../../core/config/schema.ts';
import { createGatewayApp, type GatewayAppOptions } from '../../../services/gateway/app.ts';
import type { Kernel } from '../../../services/kernel.ts';
import type { SigilConfig } from '../../../services/config.ts';
import { createRuntimeApp, type RuntimeApp } from '../../../services/runtime/app.ts';
import type { ChatSettings } from '../../../services/runtime/chat/chat.ts';
import type { ReflectPipeline } from '../../../services/runtime/reflect/pipeline.ts';
import { openTestKernel, type ConfigOverrides, type TestDatabase } from '../../support/kernel.ts';
import { bearerHeader, GATEWAY_PUBLIC, RUNTIME_PUBLIC } from '../../core/auth/support.ts';

export { GATEWAY_PUBLIC, RUNTIME_PUBLIC };

/** The plugins `sigil up` loads, with another TEE backend in place of tee-none. */
export const pluginsWithTee = (tee: PluginEntry): PluginEntry[] => [
  tee,
  { resolve: 'registry-npm', enabled: true, options: {} },
  { resolve: 'sandbox-linux-namespaces', enabled: true, options: {} },
];

/**
 * The plugins `sigil up` loads, with the local LLM stand-in (given these options) beside them;
 * `teeOptions` are tee-none's (`{ keyMaterial: undefined }`: none, not the shared test kernels' key).
 */
export const pluginsWithLocalProvider = (
  options: Record<string, unknown> = {},
  teeOptions: Record<string, unknown> = {},
): PluginEntry[] => [
  ...pluginsWithTee({ resolve: 'tee-none', enabled: true, options: teeOptions }),
  { resolve: 'provider-local', enabled: true, options },
];

/** A server listening before its handler exists, so each service can be told the other's real URL. */
class Port {
  private handler: RequestListener = (_req, res) => {
    res.statusCode = 503;
    res.end();
  };
  private constructor(
    readonly server: Server,
    readonly url: string,
    readonly requests: string[],
  ) {}

  static async open(): Promise<Port> {
    const requests: string[] = [];
    const holder: { handler?: RequestListener } = {};
    const server = createServer((req, res) => {
      requests.push(`${req.method} ${req.url}`);
      holder.handler?.(req, res);
    });
    // Longer than a test stays idle: a client's pooled socket must not meet the server's keep-alive
    // close as it sends (an unretried POST then fails ECONNRESET; seen with a hundred messages at once
    // on a loaded machine at 1 s). Stacks close their connections themselves (`close`).
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const opened = new Port(server, `http://127.0.0.1:${port}`, requests);
    holder.handler = (req, res) => opened.handler(req, res);
    return opened;
  }

  serve(handler: RequestListener): void {
    this.handler = handler;
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}

export interface StackOptions {
  database: TestDatabase;
  config?: ConfigOverrides;
  clock?: ManualClock;
  gateway?: GatewayAppOptions;
  logs?: Writable;
  /** Where plugin packages resolve from (a deployment's folder); see openTestKernel. */
  configDir?: string;
  /** What the runtime's self-improvement runs. */
  reflectPipeline?: ReflectPipeline;
}

/**
 * The runtime and the gateway on one real kernel, each on an ephemeral port, each knowing the other's
 * real address: the gateway reads the runtime's JWKS and attestation there, the runtime reaches the
 * gateway there. Public URLs stay the test ones (what JWTs and signatures name).
 */
export class Stack {
  private constructor(
    readonly kernel: Kernel,
    readonly clock: ManualClock,
    readonly runtime: RuntimeApp,
    private readonly ports: { runtime: Port; gateway: Port },
    private readonly closers: (() => Promise<void>)[],
  ) {}

  static async start(options: StackOptions): Promise<Stack> {
    const clock = options.clock ?? new ManualClock();
    const config = options.config ?? {};
    const ports = { runtime: await Port.open(), gateway: await Port.open() };
    const kernel = await openTestKernel({
      database: options.database,
      clock,
      ...(options.logs ? { logDestination: options.logs } : {}),
      ...(options.configDir ? { configDir: options.configDir } : {}),
      config: {
        ...config,
        gateway: {
          publicUrl: GATEWAY_PUBLIC,
          ...config.gateway,
          delegation: {
            enabled: true,
            cacheSeconds: 300,
            requireTrusted: false,
            runtimeUrl: ports.runtime.url,
            ...config.gateway?.delegation,
          },
        },
        runtime: { publicUrl: RUNTIME_PUBLIC, ...config.runtime },
      },
    });
    try {
      const runtime = await createRuntimeApp(kernel, {
        gatewayUrl: ports.gateway.url,
        ...(options.reflectPipeline ? { reflectPipeline: options.reflectPipeline } : {}),
      });
      await runtime.vault.ready();
      ports.runtime.serve(runtime.callback());
      const gateway = createGatewayApp(kernel, options.gateway ?? {});
      ports.gateway.serve(gateway.callback());
      return new Stack(kernel, clock, runtime, ports, [
        () => runtime.reflect.close(),
        async () => runtime.vault.close(),
        () => gateway.close(),
      ]);
    } catch (err) {
      await Promise.all([ports.runtime.close(), ports.gateway.close()]);
      await kernel.close();
      throw err;
    }
  }

  /** Serves another runtime app on the runtime's port (a restart with other keys, for rotation). */
  replaceRuntime(runtime: RuntimeApp): void {
    this.ports.runtime.serve(runtime.callback());
    this.closers.push(async () => runtime.vault.close());
  }

  /** Requests the runtime's port has served, e.g. `GET /.well-known/jwks.json`. */
  runtimeRequests(): string[] {
    return this.ports.runtime.requests;
  }

  /** Requests the gateway's port has served, e.g. `POST /mcp`. */
  gatewayRequests(): string[] {
    return this.ports.gateway.requests;
  }

  async close(): Promise<void> {
    for (const close of this.closers) await close();
    await Promise.all([this.ports.runtime.close(), this.ports.gateway.close()]);
    await this.kernel.close();
  }

  url(service: 'runtime' | 'gateway', path = ''): string {
    return `${this.ports[service].url}${path}`;
  }

  fetch(service: 'runtime' | 'gateway', path: string, init: RequestInit = {}): Promise<Response> {
    return fetch(this.url(service, path), init);
  }

  get(service: 'runtime' | 'gateway', path: string, bearer?: string): Promise<Response> {
    return this.fetch(service, path, bearer === undefined ? {} : { headers: bearerHeader(bearer) });
  }

  send(
    service: 'runtime' | 'gateway',
    method: string,
    path: string,
    body: unknown,
    bearer?: string,
  ): Promise<Response> {
    return this.fetch(service, path, {
      method,
      headers: {
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(bearer === undefined ? {} : bearerHeader(bearer)),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  /** SIWE with the runtime; returns its session JWT. */
  signIn(wallet: PrivateKeyAccount, service: 'runtime' | 'gateway' = 'runtime'): Promise<string> {
    return signInAt(this.url(service, service === 'runtime' ? '/auth' : '/api/auth'), wallet);
  }

  /** A delegated JWT for the signed-in wallet, minted by the runtime. */
  gatewayToken(jwt: string): Promise<string> {
    return gatewayTokenAt(this.url('runtime'), jwt);
  }
}

/** SIWE at a service's sign-in routes (`<authUrl>/challenge`, `/verify`); returns its session JWT. */
async function signInAt(authUrl: string, wallet: PrivateKeyAccount): Promise<string> {
  const challenge = await fetch(`${authUrl}/challenge?address=${wallet.address}`);
  const { message } = (await challenge.json()) as { message: string };
  const res = await fetch(`${authUrl}/verify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message, signature: await wallet.signMessage({ message }) }),
  });
  if (res.status !== 200) throw new Error(`verify failed: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { token: string }).token;
}

/** A delegated JWT minted by the runtime at `runtimeUrl` for the wallet of session `jwt`. */
async function gatewayTokenAt(runtimeUrl: string, jwt: string): Promise<string> {
  const res = await fetch(`${runtimeUrl}/wallet/gateway-token`, {
    method: 'POST',
    headers: bearerHeader(jwt),
  });
  if (res.status !== 200) throw new Error(`gateway-token failed: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { token: string }).token;
}

/** Signs `wallet` in at the runtime at `runtimeUrl` (SIWE) and has it mint a delegated JWT. */
export async function mintDelegatedToken(runtimeUrl: string, wallet: PrivateKeyAccount): Promise<string> {
  return gatewayTokenAt(runtimeUrl, await signInAt(`${runtimeUrl}/auth`, wallet));
}

/** The gateway's view of a bearer token (GET /api/auth/session), with its trust header. */
export interface GatewaySession {
  status: number;
  trustHeader: string | null;
  body: Record<string, unknown>;
}

export async function gatewaySession(stack: Stack, token: string): Promise<GatewaySession> {
  const res = await stack.get('gateway', '/api/auth/session', token);
  return {
    status: res.status,
    trustHeader: res.headers.get('x-sigil-runtime-trust'),
    body: (await res.json()) as Record<string, unknown>,
  };
}

/**
 * A Stack whose chats run on the operator's own provider key (chat.internalKey) with no minimum
 * balance, and a vault in a fresh folder; `close` removes the folder too. For tests of holds and
 * charges that need no wallet key.
 */
export async function internalKeyStack(
  database: TestDatabase,
  options: {
    operatorKey: string;
    chat: Partial<ChatSettings>;
    history?: Partial<SigilConfig['runtime']['history']>;
    clock?: ManualClock;
    logs?: Writable;
    reflectPipeline?: ReflectPipeline;
    selfImprovement?: Partial<SigilConfig['runtime']['selfImprovement']>;
    /** Replicas' settings (database.shared, leaseSeconds, …). */
    database?: ConfigOverrides['database'];
  },
): Promise<{ stack: Stack; close(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'sigil-chat-'));
  const stack = await Stack.start({
    database,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.logs ? { logs: options.logs } : {}),
    ...(options.reflectPipeline ? { reflectPipeline: options.reflectPipeline } : {}),
    config: {
      ...(options.database ? { database: options.database } : {}),
      vault: { persistenceDir: dir },
      ledger: { minimumBalance: '0' } as never,
      runtime: {
        providerApiKey: options.operatorKey,
        chat: { internalKey: true, ...options.chat } as never,
        ...(options.history ? { history: options.history as never } : {}),
        ...(options.selfImprovement ? { selfImprovement: options.selfImprovement as never } : {}),
      },
      plugins: pluginsWithLocalProvider(),
    },
  });
  return {
    stack,
    close: async () => {
      await stack.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
