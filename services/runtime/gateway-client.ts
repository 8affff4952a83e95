import { createHash } from 'node:crypto';
import type {
  Client,
  DiscoverResult,
  FetchLike,
  StreamableHTTPClientTransport,
} from '@modelcontextprotocol/client';
import type { Address, Hex } from 'viem';
import type { DelegationKeys } from '../../core/auth/delegation/keys.ts';
import { erc8128 } from '../../core/auth/erc8128.ts';
import { ON_BEHALF_OF_HEADER } from '../../core/auth/on-behalf-of.ts';
import { viemAccounts } from '../../core/chain/viem.ts';
import { unixSeconds, type Clock } from '../../core/clock.ts';
import { importedOnce } from '../../core/imported-once.ts';
import { mcpClientModule } from '../../core/mcp/warm-schemas.ts';
import { SigilError } from '@sigil/plugin-api';

/** Signs an RFC 9421 signature base as an EIP-191 message: a viem account does. */
export interface OperatorSigner {
  address: Address;
  signMessage(args: { message: { raw: Uint8Array } }): Promise<Hex>;
}

export interface OperatorFetchOptions {
  /** The operator's account, or how to make it at the first request. */
  signer: OperatorSigner | (() => Promise<OperatorSigner>);
  /** The chain id in the ERC-8128 keyid (the gateway accepts its `auth.chainId`, 8453). */
  chainId: number;
  clock: Clock;
  /**
   * The gateway's public URL, which it checks signatures against. When requests go to another address
   * (an internal one, a test port), the signature is made for this origin with the request's path.
   */
  signFor?: string;
  /** Validity of each signature; at most the gateway's `auth.requestSignatureMaxAgeSeconds`. */
  ttlSeconds?: number;
  fetch?: FetchLike;
}

/**
 * A `fetch` that signs every request with the operator wallet (ERC-8128: RFC 9421 over the authority,
 * method, path, query and body digest, with a fresh nonce), for the MCP SDK's
 * StreamableHTTPClientTransport: `new StreamableHTTPClientTransport(url, { fetch: operatorFetch(…) })`.
 */
export function operatorFetch(options: OperatorFetchOptions): FetchLike {
  const send = options.fetch ?? fetch;
  return async (url, init = {}) => {
    const [{ signRequest }, account] = await Promise.all([
      erc8128(),
      typeof options.signer === 'function' ? options.signer() : options.signer,
    ]);
    const signer = {
      address: account.address,
      chainId: options.chainId,
      signMessage: (message: Uint8Array) => account.signMessage({ message: { raw: message } }),
    };
    const target = new URL(url);
    const signedUrl =
      options.signFor === undefined ? target : new URL(`${target.pathname}${target.search}`, options.signFor);
    const { signal, ...rest } = init;
    const headers = new Headers(rest.headers);
    const signed = await signRequest(signedUrl.href, rest, signer, {
      created: unixSeconds(options.clock),
      ttlSeconds: options.ttlSeconds ?? 60,
      // The scope headers the request carries are signed too: the gateway accepts the wallet named
      // in X-Sigil-On-Behalf-Of only when the operator's signature covers it.
      components: SCOPE_HEADERS.filter((name) => headers.has(name)),
    });
    return send(target, {
      ...rest,
      headers: signed.headers,
      ...(signal === undefined ? {} : { signal }),
    });
  };
}

/**
 * The MCP revision the runtime speaks to the gateway: pinned, with no fallback to `initialize` (the
 * gateway serves it beside 2025-11-25; docs/mcp-revisions.md).
 */
export const GATEWAY_MCP_REVISION = '2026-07-28';

/** The gateway's X-MCP-Session header: whose enabled set a request reads and changes. */
export const MCP_SESSION_HEADER = 'x-mcp-session';

/** Headers that scope a gateway request to a wallet and a session, signed on the operator path. */
const SCOPE_HEADERS = [ON_BEHALF_OF_HEADER, MCP_SESSION_HEADER];

/**
 * Whom a chat's or a canvas run's gateway requests are for: `wallet` (on the operator path named in
 * X-Sigil-On-Behalf-Of; a delegated JWT names it itself) and its own `session` id (gatewayScopeOf).
 */
export interface GatewayScope {
  wallet: Address;
  session: string;
}

/**
 * What has a gateway session of its own, and the domain its id is digested under. Never changed: the
 * gateway keeps a session's enabled servers under its id, which another digest would orphan.
 */
const SCOPE_DOMAINS = { chat: 'sigil-chat-session', canvas: 'sigil-canvas-run' } as const;

/**
 * The gateway scope of a chat session or a canvas run: its wallet, and an X-MCP-Session that is a
 * digest of its kind, wallet and id (a random UUID), so unguessable, one per session or run, never
 * another wallet's, and not the runtime's id itself.
 */
export function gatewayScopeOf(
  kind: keyof typeof SCOPE_DOMAINS,
  owner: { wallet: string; id: string },
): GatewayScope {
  const digest = createHash('sha256')
    .update(`${SCOPE_DOMAINS[kind]}\0${owner.wallet.toLowerCase()}\0${owner.id}`)
    .digest('base64url');
  return { wallet: owner.wallet as Address, session: `${kind}.${digest}` };
}

export interface DelegatedFetchOptions {
  keys: DelegationKeys;
  wallet: Address;
  /** The gateway's public base URL: the JWT's `aud`. */
  audience: string;
  clock: Clock;
  fetch?: FetchLike;
}

/** A token is minted again when less than this is left of it. */
const REMINT_MARGIN_MS = 60_000;

/**
 * A `fetch` that carries a delegated JWT for `wallet` as its bearer token, minted on first use and again
 * shortly before it expires, for the MCP SDK's StreamableHTTPClientTransport.
 */
export function delegatedFetch(options: DelegatedFetchOptions): FetchLike {
  const send = options.fetch ?? fetch;
  let current: { token: string; expiresAt: number } | undefined;
  return async (url, init = {}) => {
    if (current === undefined || current.expiresAt - options.clock.now().getTime() < REMINT_MARGIN_MS) {
      const minted = await options.keys.sign(options.wallet, options.audience);
      current = { token: minted.token, expiresAt: minted.expiresAt.getTime() };
    }
    const headers = new Headers(init.headers);
    headers.set('authorization', `Bearer ${current.token}`);
    return send(url, { ...init, headers });
  };
}

export interface GatewayClientOptions {
  /** Where the runtime reaches the gateway (its public URL unless told otherwise). */
  url: string;
  /** The gateway's public base URL: delegated JWTs' audience, and what signatures are made for. */
  publicUrl: string;
  keys: DelegationKeys;
  /** `runtime.operatorKey`: the operator wallet; without it there is no operator path. */
  operatorKey: Hex | undefined;
  chainId: number;
  clock: Clock;
}

/**
 * The runtime as a client of the tool gateway, both ways the runtime spec names: the operator path
 * (ERC-8128 signed by the operator wallet) and the delegated path (a wallet's ES256 JWT). Each gives
 * a transport for the official MCP SDK client (v2, `@modelcontextprotocol/client`).
 */
export class GatewayClient {
  /** The operator wallet's account, made (viem's accounts imported) at the first operator request. */
  private readonly operator: (() => Promise<OperatorSigner>) | undefined;
  /**
   * The gateway's `server/discover` answers by endpoint, kept for their `ttlMs` when public (the same
   * for every wallet): a tool loop connects with one as `prior`, without a round trip.
   */
  private readonly discovered = new Map<string, { result: DiscoverResult; until: number }>();

  constructor(private readonly options: GatewayClientOptions) {
    const key = options.operatorKey;
    this.operator =
      key === undefined
        ? undefined
        : importedOnce(async () => (await viemAccounts()).privateKeyToAccount(key));
  }

  /**
   * Points the client at another address of the same gateway (its public URL stays what JWTs and
   * signatures name): `sigil up` sets the URL its own gateway listens on.
   */
  reachAt(url: string): void {
    this.options.url = url;
  }

  /** Where requests go now. */
  get url(): string {
    return this.options.url;
  }

  operatorFetch(): FetchLike {
    if (this.operator === undefined) {
      throw new SigilError('unavailable', 'No operator wallet is configured for gateway calls', {
        hint: "Set runtime.operatorKey (RUNTIME_OPERATOR_KEY) to the private key of one of the gateway's operator wallets",
      });
    }
    return operatorFetch({
      signer: this.operator,
      chainId: this.options.chainId,
      clock: this.options.clock,
      signFor: this.options.publicUrl,
    });
  }

  delegatedFetch(wallet: Address): FetchLike {
    return delegatedFetch({
      keys: this.options.keys,
      wallet,
      audience: this.options.publicUrl,
      clock: this.options.clock,
    });
  }

  /**
   * A transport to the gateway's `path` (`/mcp` or `/mcp/server/:id`) signed by the operator wallet;
   * with a `scope`, acting for its wallet (X-Sigil-On-Behalf-Of) in its session (X-MCP-Session).
   */
  async operatorTransport(path = '/mcp', scope?: GatewayScope): Promise<StreamableHTTPClientTransport> {
    const headers: Record<string, string> = scope
      ? { [ON_BEHALF_OF_HEADER]: scope.wallet, [MCP_SESSION_HEADER]: scope.session }
      : {};
    const { StreamableHTTPClientTransport } = await mcpClientModule();
    return new StreamableHTTPClientTransport(this.endpoint(path), {
      fetch: this.operatorFetch(),
      requestInit: { headers },
    });
  }

  /** A transport to the gateway's `path` acting for `wallet` with delegated JWTs, in `session` when given. */
  async delegatedTransport(
    wallet: Address,
    path = '/mcp',
    session?: string,
  ): Promise<StreamableHTTPClientTransport> {
    const { StreamableHTTPClientTransport } = await mcpClientModule();
    return new StreamableHTTPClientTransport(this.endpoint(path), {
      fetch: this.delegatedFetch(wallet),
      requestInit: { headers: session === undefined ? {} : { [MCP_SESSION_HEADER]: session } },
    });
  }

  /** The tool loop's transport for `scope` on `path` (runtime.chat.gatewayPath). */
  scopedTransport(
    path: 'delegated' | 'operator',
    scope: GatewayScope,
  ): Promise<StreamableHTTPClientTransport> {
    return path === 'operator'
      ? this.operatorTransport('/mcp', scope)
      : this.delegatedTransport(scope.wallet, '/mcp', scope.session);
  }

  /**
   * An MCP client of the gateway's `/mcp` for the tool loop, at GATEWAY_MCP_REVISION: every request
   * carries the revision and the client's capabilities (none: a server that needs sampling or
   * elicitation is a tool error) in its `_meta`, and there is no `initialize`. The first connection
   * asks `server/discover`; later ones adopt its answer while its cache hint lasts.
   */
  async toolClient(
    path: 'delegated' | 'operator',
    scope: GatewayScope,
    signal: AbortSignal,
  ): Promise<Client> {
    const transport = await this.scopedTransport(path, scope);
    const { Client } = await mcpClientModule();
    const key = this.endpoint('/mcp').href;
    const now = this.options.clock.now().getTime();
    const known = this.discovered.get(key);
    const prior = known !== undefined && known.until > now ? known.result : undefined;
    const client = new Client(
      { name: 'sigil-runtime', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: GATEWAY_MCP_REVISION } } },
    );
    await client.connect(transport, { signal, ...(prior && { prior: { kind: 'modern', discover: prior } }) });
    const result = prior === undefined ? client.getDiscoverResult() : undefined;
    const ttlMs = result?.ttlMs;
    if (result !== undefined && result.cacheScope === 'public' && typeof ttlMs === 'number' && ttlMs > 0)
      this.discovered.set(key, { result, until: now + ttlMs });
    return client;
  }

  private endpoint(path: string): URL {
    return new URL(`${this.options.url.replace(/\/+$/, '')}${path}`);
  }
}
