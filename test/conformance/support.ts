import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { UnsecuredJWT } from 'jose';
import type { Hex } from 'viem';
import { createSiweMessage, parseSiweMessage } from 'viem/siwe';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { CheckResult } from '@sigil/plugin-api/kit';
import type { DeploymentTarget } from '../../conformance/deployment/context.ts';
import { runDeployment } from '../../conformance/deployment/run.ts';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import { ENVELOPE, MODERN_REVISION } from '../../core/mcp/era.ts';
import { serve } from '../../services/serve.ts';
import { chainClients, sigilDollarAbi } from '../solidity/support.ts';
import type { DevChain } from '../support/chain.ts';
import { runSigil as runSigilCommand, type CliResult } from '../support/cli.ts';
import { openTestKernel, type ConfigOverrides } from '../support/kernel.ts';

export type CliRun = CliResult;

/** Runs `node bin/sigil.js …` as a child process, with `env` added to this process's environment. */
export const runSigil = (
  args: readonly string[],
  env: Record<string, string> = {},
  cwd?: string,
): Promise<CliRun> => runSigilCommand(args, { env, ...(cwd ? { cwd } : {}) });

export interface RunningSigil {
  runtimeUrl: string;
  gatewayUrl: string;
  stop(): Promise<void>;
}

/** A real kernel serving both services on ephemeral ports, as `sigil up` does. */
export async function startSigil(config: ConfigOverrides = {}): Promise<RunningSigil> {
  const kernel = await openTestKernel({
    config: {
      ...config,
      runtime: { port: 0, ...config.runtime },
      gateway: { port: 0, ...config.gateway },
    },
  });
  const serving = await serve(kernel, ['runtime', 'gateway']);
  return {
    runtimeUrl: serving.urls.runtime as string,
    gatewayUrl: serving.urls.gateway as string,
    stop: () => serving.stop(),
  };
}

export interface TinyServer {
  url: string;
  close(): Promise<void>;
}

/** A bare node:http server for deployments that misbehave in ways a real Sigil never would. */
export async function startTinyServer(
  handler: (request: IncomingMessage, response: ServerResponse) => void,
): Promise<TinyServer> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Answers JSON with a status. */
export function sendJson(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(body));
}

/** A fresh directory for one run's reports, removed by `cleanup`. */
export function reportDir(): { dir: string; read(name: string): string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'sigil-conformance-'));
  return {
    dir,
    read: (name) => readFileSync(join(dir, name), 'utf8'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * `sigil conformance deployment --only <group>` against one runtime (as both URLs): its exit code,
 * what it printed, and each result of its JSON report as [id, status].
 */
export async function certifyGroup(
  runtimeUrl: string,
  group: string,
): Promise<{ code: number | null; output: string; results: [string, string][] }> {
  const out = reportDir();
  try {
    const run = await runSigil([
      'conformance',
      'deployment',
      '--runtime',
      runtimeUrl,
      '--gateway',
      runtimeUrl,
      '--out',
      out.dir,
      '--only',
      group,
    ]);
    const report = JSON.parse(out.read('report.json')) as { results: { id: string; status: string }[] };
    return {
      code: run.code,
      output: run.stdout + run.stderr,
      results: report.results.map((result) => [result.id, result.status]),
    };
  } finally {
    out.cleanup();
  }
}

/** Runs the deployment requirements `ids` against `target`: each one's result, by id. */
export async function runRequirements(
  target: DeploymentTarget,
  ids: readonly string[],
): Promise<Record<string, CheckResult>> {
  const report = await runDeployment(target, {
    requirements: REQUIREMENTS.filter((requirement) => ids.includes(requirement.id)),
  });
  return Object.fromEntries(report.results.map((result) => [result.id, result]));
}

export const statuses = (results: Record<string, CheckResult>) =>
  Object.fromEntries(Object.entries(results).map(([id, result]) => [id, result.status]));

/** A funded payer of the tester's: the token minted to it, and ether for the deposit's gas. */
export async function payerKey(chain: DevChain): Promise<Hex> {
  const key = generatePrivateKey();
  const { address } = privateKeyToAccount(key);
  const { publicClient, operatorWallet } = chainClients(chain);
  await publicClient.waitForTransactionReceipt({
    hash: await operatorWallet.writeContract({
      address: chain.token.address,
      abi: sigilDollarAbi,
      functionName: 'mint',
      args: [address, 1_000_000n],
    }),
  });
  await publicClient.waitForTransactionReceipt({
    hash: await operatorWallet.sendTransaction({ to: address, value: 10n ** 17n }),
  });
  return key;
}

/** One request to a fake service: its route (`GET /path`), URL and JSON body. */
export interface FakeRequest {
  request: IncomingMessage;
  url: URL;
  route: string;
  body: string;
  json: () => Record<string, unknown>;
}

/**
 * A fake service's request handler that signs wallets in as Sigil's services do (SIWE challenge, then
 * an unsigned JWT naming the address) under `authPrefix` (the gateway's `/api`, the runtime's none),
 * and passes every other request, read whole, to `handle`.
 */
export function fakeSignedInService(
  handle: (request: FakeRequest, response: ServerResponse) => void,
  { authPrefix = '' }: { authPrefix?: string } = {},
): (request: IncomingMessage, response: ServerResponse) => void {
  return (request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      const url = new URL(request.url ?? '/', 'http://fake');
      const route = `${request.method} ${url.pathname}`;
      const json = () => (body ? (JSON.parse(body) as Record<string, unknown>) : {});
      if (route === `GET ${authPrefix}/auth/challenge`) {
        const address = url.searchParams.get('address') as `0x${string}`;
        const issuedAt = new Date();
        const fields = {
          domain: 'fake.example',
          uri: 'http://fake.example',
          chainId: 8453,
          nonce: randomUUID().replace(/-/g, ''),
        };
        const message = createSiweMessage({ ...fields, address, version: '1', issuedAt });
        return sendJson(response, 200, {
          ...fields,
          message,
          issuedAt: issuedAt.toISOString(),
          expiresAt: new Date(Date.now() + 300_000).toISOString(),
        });
      }
      if (route === `POST ${authPrefix}/auth/verify`) {
        const { address } = parseSiweMessage((json() as { message: string }).message);
        return sendJson(response, 200, {
          token: new UnsecuredJWT({ sub: address }).encode(),
          tokenType: 'Bearer',
          expiresAt: 'in an hour',
          expiresIn: 3600,
          address,
        });
      }
      handle({ request, url, route, body, json }, response);
    });
  };
}

/**
 * MCP 2026-07-28 at the least a fake gateway needs for the runner to take it for one that speaks it
 * (the feature `mcp-2026`): a request claims the revision in `params._meta`, `server/discover`
 * answers, and every result says it is complete. The envelope's other keys and the standard headers
 * go unchecked: gateway-mcp-requirements.test.ts's fake is held to those.
 */
export const claimsModern = (params: Record<string, unknown>): boolean =>
  typeof params._meta === 'object' && params._meta !== null && ENVELOPE.protocolVersion in params._meta;

/** A result as 2026-07-28 frames it. */
export const complete = <T extends object>(result: T): T & { resultType: 'complete' } => ({
  ...result,
  resultType: 'complete',
});

/** The result of `server/discover`. */
export const DISCOVERED = complete({
  supportedVersions: [MODERN_REVISION],
  capabilities: { tools: {} },
  ttlMs: 0,
  cacheScope: 'public',
});
