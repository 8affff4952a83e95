import type { Clock } from '../clock.ts';
import type { CoreConfig } from '../config/schema.ts';
import type { Database } from '../db/database.ts';
import type { SecretRegistry } from '../log.ts';

/** What wallet auth needs from the kernel (a Kernel satisfies it). */
export interface AuthDeps {
  config: CoreConfig;
  db: Database;
  clock: Clock;
  secrets: SecretRegistry;
}

/** Where a service is reached, from its config section. */
export interface ServiceAddress {
  host: string;
  port: number;
  publicUrl?: string | undefined;
}

/** What a service decides of its wallet auth; the rest comes from the shared `auth` config section. */
export interface ServiceAuth {
  /** The service's name, which is also its config section's: in SIWE messages, nonces, realm, audience. */
  service: string;
  /** The service's config section: its address and its largest request body. */
  section: ServiceAddress & { bodyLimitBytes: number };
  routePrefix: string;
  jwtTtlSeconds: number;
  /** Whether the service issues and accepts long-lived wallet tokens. */
  walletTokens: boolean;
  /** Reject bearer-only requests from operator wallets. */
  enforceOperatorSignatures: boolean;
  /** Operator wallets may act for a wallet with X-Sigil-On-Behalf-Of. */
  actingForWallets: boolean;
  /** The operator wallets. */
  operators: readonly string[];
}

/** Everything one service's wallet auth works with, derived from config once. */
export interface AuthSettings extends Omit<ServiceAuth, 'section' | 'operators'> {
  /** `http(s)://host[:port][/base]` without a trailing slash: SIWE `URI`, JWT `iss`, ERC-8128 base. */
  baseUrl: string;
  /** Whether `baseUrl` is the configured public URL (not the bind address, a stand-in for local use). */
  publicUrlConfigured: boolean;
  /** SIWE `domain`: host and port of the public URL. */
  domain: string;
  /** SIWE scheme, e.g. `https`. */
  scheme: string;
  /** JWT `aud`: `sigil:<service>`, so one service's session is useless at another. */
  audience: string;
  /** Lower-cased operator wallets, for case-insensitive membership tests. */
  operators: ReadonlySet<string>;
  chainId: number;
  challengeTtlSeconds: number;
  clockSkewSeconds: number;
  requestSignatureMaxAgeSeconds: number;
  bodyLimitBytes: number;
}

/** The URL clients use; without `publicUrl` it is the bind address, which suits local development only. */
export function publicBaseUrl(service: ServiceAddress): URL {
  if (service.publicUrl !== undefined) return new URL(service.publicUrl);
  const host = service.host.includes(':') ? `[${service.host}]` : service.host;
  return new URL(`http://${host}:${service.port}`);
}

/** The public base URL as text without a trailing slash, for appending paths: `https://host/prefix`. */
export function publicBase(service: ServiceAddress): string {
  const url = publicBaseUrl(service);
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

export function authSettings(
  auth: CoreConfig['auth'],
  { section, operators, ...service }: ServiceAuth,
): AuthSettings {
  const url = publicBaseUrl(section);
  return {
    ...service,
    baseUrl: publicBase(section),
    publicUrlConfigured: section.publicUrl !== undefined,
    domain: url.host,
    scheme: url.protocol.replace(/:$/, ''),
    audience: `sigil:${service.service}`,
    operators: new Set(operators.map((wallet) => wallet.toLowerCase())),
    chainId: auth.chainId,
    challengeTtlSeconds: auth.challengeTtlSeconds,
    clockSkewSeconds: auth.clockSkewSeconds,
    requestSignatureMaxAgeSeconds: auth.requestSignatureMaxAgeSeconds,
    bodyLimitBytes: section.bodyLimitBytes,
  };
}
