import { signRequest, type SignOptions } from '@slicekit/erc8128';
import type { Hex } from 'viem';
import { createSiweMessage, parseSiweMessage } from 'viem/siwe';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { ManualClock, unixSeconds } from '../../../core/clock.ts';
import { listen, type RunningServer } from '../../../core/http/server.ts';
import { createGatewayApp } from '../../../services/gateway/app.ts';
import type { Kernel } from '../../../services/kernel.ts';
import { createRuntimeApp } from '../../../services/runtime/app.ts';
import {
  GATEWAY_PUBLIC,
  openTestKernel,
  RUNTIME_PUBLIC,
  type ConfigOverrides,
  type TestDatabase,
} from '../../support/kernel.ts';

export { GATEWAY_PUBLIC, RUNTIME_PUBLIC };

export type Service = 'gateway' | 'runtime';
export const AUTH_PREFIX: Record<Service, string> = { gateway: '/api/auth', runtime: '/auth' };
const PUBLIC: Record<Service, string> = { gateway: GATEWAY_PUBLIC, runtime: RUNTIME_PUBLIC };

export interface ServicesOptions {
  database: TestDatabase;
  config?: ConfigOverrides;
  clock?: ManualClock;
}

/** A real kernel with both services listening on ephemeral ports. */
export class Services {
  private constructor(
    readonly kernel: Kernel,
    readonly clock: ManualClock,
    private readonly servers: Record<Service, RunningServer>,
  ) {}

  static async start(options: ServicesOptions): Promise<Services> {
    const clock = options.clock ?? new ManualClock();
    const config = options.config ?? {};
    const kernel = await openTestKernel({
      database: options.database,
      clock,
      config: {
        ...config,
        gateway: { publicUrl: GATEWAY_PUBLIC, bodyLimitBytes: 64 * 1024, ...config.gateway },
        runtime: { publicUrl: RUNTIME_PUBLIC, ...config.runtime },
      },
    });
    try {
      // As sigil up composes them: the gateway reads the runtime it is served beside directly.
      const runtimeApp = await createRuntimeApp(kernel);
      const gateway = await listen(
        createGatewayApp(kernel, { inProcessRuntime: runtimeApp.inProcess }),
        '127.0.0.1',
        0,
      );
      const runtime = await listen(runtimeApp, '127.0.0.1', 0);
      return new Services(kernel, clock, { gateway, runtime });
    } catch (err) {
      await kernel.close();
      throw err;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.servers.gateway.close(0), this.servers.runtime.close(0)]);
    await this.kernel.close();
  }

  url(service: Service, path: string): string {
    return `${this.servers[service].url}${path}`;
  }

  fetch(service: Service, path: string, init: RequestInit = {}): Promise<Response> {
    return fetch(this.url(service, path), init);
  }

  get(service: Service, path: string, bearer?: string): Promise<Response> {
    return this.fetch(service, path, bearer === undefined ? {} : { headers: bearerHeader(bearer) });
  }

  postJson(service: Service, path: string, body: unknown, bearer?: string): Promise<Response> {
    return this.fetch(service, path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(bearer === undefined ? {} : bearerHeader(bearer)) },
      body: JSON.stringify(body),
    });
  }

  async challenge(service: Service, address: string): Promise<Challenge> {
    const res = await this.get(service, `${AUTH_PREFIX[service]}/challenge?address=${address}`);
    if (res.status !== 200) throw new Error(`challenge failed: ${res.status} ${await res.text()}`);
    return (await res.json()) as Challenge;
  }

  verify(service: Service, message: string, signature: Hex): Promise<Response> {
    return this.postJson(service, `${AUTH_PREFIX[service]}/verify`, { message, signature });
  }

  /** The whole SIWE exchange; returns the session JWT. */
  async signIn(service: Service, wallet: PrivateKeyAccount): Promise<string> {
    const { message } = await this.challenge(service, wallet.address);
    const res = await this.verify(service, message, await wallet.signMessage({ message }));
    if (res.status !== 200) throw new Error(`verify failed: ${res.status} ${await res.text()}`);
    return ((await res.json()) as { token: string }).token;
  }

  async createWalletToken(jwt: string, label?: string): Promise<{ token: string; id: string }> {
    const res = await this.postJson('gateway', '/api/auth/create-token', label ? { label } : {}, jwt);
    if (res.status !== 201) throw new Error(`create-token failed: ${res.status} ${await res.text()}`);
    return (await res.json()) as { token: string; id: string };
  }

  /** Signs a request with ERC-8128 for the service's public URL, created now on the test clock. */
  sign(
    service: Service,
    wallet: PrivateKeyAccount,
    path: string,
    init: RequestInit = {},
    options: SigningOptions = {},
  ): Promise<Request> {
    const { chainId = 8453, signFor = PUBLIC[service], ...signOptions } = options;
    return signRequest(
      `${signFor}${path}`,
      init,
      {
        address: wallet.address,
        chainId,
        signMessage: (message) => wallet.signMessage({ message: { raw: message } }),
      },
      { created: unixSeconds(this.clock), ...signOptions },
    );
  }

  /** Signs, then sends exactly those headers to the real server; `send` may replace the body or add headers. */
  async signed(
    service: Service,
    wallet: PrivateKeyAccount,
    path: string,
    init: RequestInit = {},
    options: SigningOptions & { send?: RequestInit } = {},
  ): Promise<{ response: Response; request: Request }> {
    const { send = {}, ...signing } = options;
    const request = await this.sign(service, wallet, path, init, signing);
    return {
      response: await this.replay(service, path, request, { body: init.body ?? null, ...send }),
      request,
    };
  }

  /** Sends a signed request's method and headers (again) to the real server. */
  replay(service: Service, path: string, signed: Request, send: RequestInit = {}): Promise<Response> {
    const headers = new Headers(signed.headers);
    new Headers(send.headers).forEach((value, name) => headers.set(name, value));
    return this.fetch(service, path, { method: signed.method, body: send.body ?? null, headers });
  }

  async session(service: Service, bearer: string): Promise<Response> {
    return this.get(service, `${AUTH_PREFIX[service]}/session`, bearer);
  }
}

/** Signing options, plus the keyid chain and the public URL to sign for (default: the service's). */
export type SigningOptions = SignOptions & { chainId?: number; signFor?: string };

export interface Challenge {
  nonce: string;
  message: string;
  domain: string;
  uri: string;
  chainId: number;
  issuedAt: string;
  expiresAt: string;
}

export const bearerHeader = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` });

export const newWallet = (): PrivateKeyAccount => privateKeyToAccount(generatePrivateKey());

/** Reads an error response: status and the stable error body. */
export async function errorOf(res: Response): Promise<{ status: number; code: string; message: string }> {
  const body = (await res.json()) as { code: string; message: string };
  return { status: res.status, code: body.code, message: body.message };
}

/** The challenge's message with some fields replaced, as a client could sign it. */
export function rewriteChallenge(
  challenge: Challenge,
  changes: Partial<Parameters<typeof createSiweMessage>[0]>,
): string {
  const fields = parseSiweMessage(challenge.message);
  return createSiweMessage({
    address: fields.address!,
    chainId: fields.chainId!,
    domain: fields.domain!,
    nonce: fields.nonce!,
    uri: fields.uri!,
    version: '1',
    issuedAt: fields.issuedAt!,
    expirationTime: fields.expirationTime!,
    scheme: fields.scheme!,
    ...changes,
  });
}
