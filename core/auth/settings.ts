import type { Clock } from '../clock.ts';
import type { SigilConfig } from '../config/schema.ts';
import type { Database } from '../db/database.ts';
import type { SecretRegistry } from '../log.ts';

/** The services that sign wallets in; each has its own nonces, JWT audience and routes. */
export type AuthService = 'gateway' | 'runtime';

/** What wallet auth needs from the kernel (a Kernel satisfies it). */
export interface AuthDeps {
  config: SigilConfig;
  db: Database;
  clock: Clock;
  secrets: SecretRegistry;
}

/** Everything that differs between the gateway's and the runtime's wallet auth, derived from config once. */
export interface AuthSettings {
  service: AuthService;
  /** `http(s)://host[:port][/base]` without a trailing slash: SIWE `URI`, JWT `iss`, ERC-8128 base. */
  baseUrl: string;
  /** Whether `baseUrl` is the configured public URL (not the bind address, a stand-in for local use). */
  publicUrlConfigured: boolean;
  /** SIWE `domain`: host and port of the public URL. */
  domain: string;
  /** SIWE scheme, e.g. `https`. */
  scheme: string;
  /** JWT `aud`: `sigil:gateway` or `sigil:runtime`, so one service's session is useless at the other. */
  audience: string;
  routePrefix: string;
  jwtTtlSeconds: number;
  /** Only the gateway issues and accepts long-lived wallet tokens. */
  walletTokens: boolean;
  /** Reject bearer-only requests from operator wallets (gateway only). */
  enforceOperatorSignatures: boolean;
  /** Operator wallets may act for a wallet with X-Sigil-On-Behalf-Of (gateway only). */
  actingForWallets: boolean;
  /** Lower-cased operator wallets, for case-insensitive membership tests. */
  operators: ReadonlySet<string>;
  chainId: number;
  challengeTtlSeconds: number;
  clockSkewSeconds: number;
  requestSignatureMaxAgeSeconds: number;
  bodyLimitBytes: number;
}

/** The URL clients use; without `publicUrl` it is the bind address, which suits local development only. */
export function publicBaseUrl(service: { host: string; port: number; publicUrl?: string | undefined }): URL {
  if (service.publicUrl !== undefined) return new URL(service.publicUrl);
  const host = service.host.includes(':') ? `[${service.host}]` : service.host;
  return new URL(`http://${host}:${service.port}`);
}

/** The public base URL as text without a trailing slash, for appending paths: `https://host/prefix`. */
export function publicBase(service: { host: string; port: number; publicUrl?: string | undefined }): string {
  const url = publicBaseUrl(service);
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

export function authSettings(config: SigilConfig, service: AuthService): AuthSettings {
  const url = publicBaseUrl(config[service]);
  const gateway = service === 'gateway';
  return {
    service,
    baseUrl: publicBase(config[service]),
    publicUrlConfigured: config[service].publicUrl !== undefined,
    domain: url.host,
    scheme: url.protocol.replace(/:$/, ''),
    audience: `sigil:${service}`,
    routePrefix: gateway ? '/api/auth' : '/auth',
    jwtTtlSeconds: gateway ? config.auth.gatewayJwtTtlSeconds : config.auth.runtimeJwtTtlSeconds,
    walletTokens: gateway,
    enforceOperatorSignatures: gateway && config.gateway.erc8128EnforceOperatorMcp,
    actingForWallets: gateway,
    operators: new Set(config.gateway.operatorWallets.map((wallet) => wallet.toLowerCase())),
    chainId: config.auth.chainId,
    challengeTtlSeconds: config.auth.challengeTtlSeconds,
    clockSkewSeconds: config.auth.clockSkewSeconds,
    requestSignatureMaxAgeSeconds: config.auth.requestSignatureMaxAgeSeconds,
    bodyLimitBytes: config[service].bodyLimitBytes,
  };
}
