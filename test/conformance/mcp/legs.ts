import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { gatewaySchema } from '../../../services/gateway/config.ts';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { fixturePath } from '../../support/paths.ts';
import { mcpClient, ProbeWorld, walletToken } from '../../services/gateway/support.ts';

/** The fixture server: every tool, resource and prompt the suite calls by name (SDK v2, both revisions). */
export const conformancePackage = fixturePath('mcp', 'conformance-package');

/** Its catalog entry. A short id: /mcp names its tools `cf__<tool>`, and a name has at most 64 characters. */
export const conformanceEntry = {
  id: 'cf',
  title: 'MCP conformance fixture',
  registry: 'npm',
  package: '@sigil-test/conformance-server',
  version: '^1.0.0',
  entry: { bin: 'sigil-conformance' },
  smokeTest: { tool: 'test_simple_text', arguments: {} },
  // It keeps nothing between calls: what a multi-round call needs travels in its signed requestState.
  stateless: true,
};

/** Leg B: the fixture over Streamable HTTP on loopback, straight from its package directory. */
export async function startFixtureHttp(): Promise<{ url: string; stop(): Promise<void> }> {
  const child = spawn(process.execPath, [join(conformancePackage, 'server.mjs'), '--http', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const listening = /listening (\S+)/.exec(output);
      if (listening) resolve(listening[1] as string);
    });
    child.once('exit', (code) => reject(new Error(`the fixture exited (${code}): ${output}`)));
  });
  return { url, stop: () => stopChild(child) };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

/**
 * A loopback proxy that adds headers the suite's CLI cannot send (a wallet token, X-MCP-Session) and
 * passes everything else through as sent, Host and Origin included: the gateway's own DNS-rebinding
 * check answers the suite's. Responses stream back (event streams included).
 */
export async function startHeaderProxy(
  headers: Record<string, string>,
): Promise<{ port: number; url: string; target(url: string): void; stop(): Promise<void> }> {
  let target: URL | undefined;
  const server: Server = createServer((req, res) => {
    if (!target) {
      res.writeHead(503).end();
      return;
    }
    const upstream = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: target.pathname,
        headers: { ...req.headers, ...headers },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    res.on('close', () => upstream.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    port,
    url: `http://127.0.0.1:${port}/mcp`,
    target: (url) => (target = new URL(url)),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The session leg M enables `cf` in. */
const SESSION = 'conformance';

/**
 * Legs S and M: the fixture published to a registry (verdaccio), a free gateway that installs it and
 * runs it over stdio in its sandbox, and the proxy for /mcp. S is `POST /mcp/server/cf` (anonymous),
 * M is `POST /mcp` with a wallet token and an X-MCP-Session in which `cf` is enabled.
 */
export class GatewayLegs {
  private constructor(
    private readonly world: ProbeWorld,
    private readonly serving: Serving & { url: string },
    private readonly proxy: Awaited<ReturnType<typeof startHeaderProxy>>,
    /** Leg S. */
    readonly serverUrl: string,
    /** Leg M, through the proxy. */
    readonly mcpUrl: string,
  ) {}

  static async start(): Promise<GatewayLegs> {
    const world = await ProbeWorld.start({ packages: [conformancePackage], servers: [conformanceEntry] });
    const authorization: Record<string, string> = {};
    const proxy = await startHeaderProxy(authorization);
    try {
      const { callLimits, http } = gatewaySchema.parse({
        // The suite's scenarios run one after another, each a client of its own.
        callLimits: { perAnonymousClient: 64, perWallet: 64 },
        // The suite reaches /mcp at the proxy's address, which then is a name of the gateway's.
        http: { allowedHosts: [`127.0.0.1:${proxy.port}`] },
      });
      const serving = await world.gateway(TEST_DATABASES[0], { warmupAtStart: false, callLimits, http });
      const { token } = await walletToken(serving.url);
      Object.assign(authorization, { authorization: `Bearer ${token}`, 'x-mcp-session': SESSION });
      proxy.target(`${serving.url}/mcp`);
      // Installs, verifies and starts `cf` before the suite's first request, and enables it for M.
      const client = await mcpClient(`${serving.url}/mcp`, token, SESSION);
      const enabled = await client.callTool({ name: 'gateway_enable_server', arguments: { serverId: 'cf' } });
      await client.close();
      if (enabled.isError) throw new Error(`enabling cf failed: ${JSON.stringify(enabled.content)}`);
      return new GatewayLegs(world, serving, proxy, `${serving.url}/mcp/server/cf`, proxy.url);
    } catch (err) {
      await proxy.stop();
      await world.stop();
      throw err;
    }
  }

  async stop(): Promise<void> {
    await this.proxy.stop();
    await this.serving.stop();
    await this.world.stop();
  }
}
