import type Router from '@koa/router';
import type { Middleware } from 'koa';
import type { LaneStep } from '../http/lane.ts';
import type { Logger } from '../log.ts';
import { HttpRuntimeSource, type RuntimeSource } from './delegation/source.ts';
import { DelegationVerifier } from './delegation/verifier.ts';
import type { EvidenceVerifier } from './delegation/trust.ts';
import { RequestSignatures } from './erc8128.ts';
import { authenticate, authenticateLane } from './middleware.ts';
import { bearerChallenge } from './challenge.ts';
import type { AuthChallenge } from '../http/errors.ts';
import { protectedResourceRouter } from './resource-metadata.ts';
import { authRouter } from './router.ts';
import { SessionJwts } from './session-jwt.ts';
import { authSettings, publicBaseUrl, type AuthDeps, type AuthService } from './settings.ts';
import { SigningKeyStore } from './signing-key.ts';
import { SiweChallenges } from './siwe.ts';
import { WalletTokens } from './wallet-tokens.ts';

export { requireAuth, type AuthMethod, type AuthPrincipal, type RequireAuthOptions } from './principal.ts';
export { WALLET_TOKEN_PREFIX } from './wallet-tokens.ts';
export { TRUST_HEADER } from './middleware.ts';
export type { EvidenceVerifier, RuntimeTrust, TrustState } from './delegation/trust.ts';
export type { AuthDeps, AuthService } from './settings.ts';

export interface WalletAuth {
  /** App-wide middleware that sets `ctx.state.auth`; put it before every router. */
  middleware: Middleware;
  /** The same for a lane: sets `state.auth` of each exchange. */
  laneStep: LaneStep;
  /** The service's sign-in routes. */
  router: Router;
  /** The `WWW-Authenticate` of the service's 401 answers. */
  challenge: AuthChallenge;
  /** The gateway's protected-resource metadata (RFC 9728), which MCP clients read after a 401. */
  resourceMetadata?: Router;
}

export interface WalletAuthOptions {
  /**
   * Verifiers of TEE evidence, by platform, with which the gateway judges the runtime's attestation
   * (the delegated path's trust state). None are built in yet: they come with real TEE backends.
   */
  evidenceVerifiers?: readonly EvidenceVerifier[];
  /**
   * The runtime this process serves (`sigil up`), which the gateway reads directly unless
   * `gateway.delegation.runtimeUrl` names one to read over HTTP.
   */
  inProcessRuntime?: RuntimeSource;
}

/** Wallet authentication for one service; the gateway and the runtime differ only by `service`. */
export function createWalletAuth(
  deps: AuthDeps & { logger: Logger },
  service: AuthService,
  options: WalletAuthOptions = {},
): WalletAuth {
  const settings = authSettings(deps.config, service);
  const keys = new SigningKeyStore(deps.db, deps.clock, deps.secrets, deps.config.auth.jwtSigningKey, {
    dataKey: deps.config.database.dataKey,
    logger: deps.logger,
    production: deps.config.mode === 'production',
  });
  const parts = {
    settings,
    siwe: new SiweChallenges(deps.db, deps.clock, settings, keys),
    sessions: new SessionJwts(keys, deps.clock, settings),
    signatures: new RequestSignatures(deps.db, deps.clock, settings),
    walletTokens: settings.walletTokens ? new WalletTokens(deps.db, deps.clock) : undefined,
    delegated: service === 'gateway' ? delegationVerifier(deps, settings.baseUrl, options) : undefined,
  };
  return {
    middleware: authenticate(parts),
    laneStep: authenticateLane(parts),
    router: authRouter(parts),
    // The gateway's 401s name its protected-resource metadata, which MCP clients read.
    challenge: bearerChallenge(settings, service === 'gateway'),
    ...(service === 'gateway'
      ? { resourceMetadata: protectedResourceRouter(settings, delegationIssuer(deps.config)) }
      : {}),
  };
}

/** The runtime, as the issuer of the delegated JWTs the gateway accepts, when its URL is configured. */
function delegationIssuer(config: AuthDeps['config']): string | undefined {
  if (!config.gateway.delegation.enabled) return undefined;
  return config.gateway.delegation.runtimeUrl ?? config.runtime.publicUrl;
}

/** The gateway's verifier of the runtime's delegated JWTs, when `gateway.delegation.enabled`. */
function delegationVerifier(
  deps: AuthDeps & { logger: Logger },
  audience: string,
  options: WalletAuthOptions,
): DelegationVerifier | undefined {
  const delegation = deps.config.gateway.delegation;
  if (!delegation.enabled) return undefined;
  return new DelegationVerifier({
    source: runtimeSource(deps.config, options.inProcessRuntime),
    issuer: authSettings(deps.config, 'runtime').baseUrl,
    audience,
    cacheSeconds: delegation.cacheSeconds,
    requireTrusted: delegation.requireTrusted,
    clockSkewSeconds: deps.config.auth.clockSkewSeconds,
    clock: deps.clock,
    logger: deps.logger.child({ component: 'delegation' }),
    verifiers: options.evidenceVerifiers ?? [],
  });
}

/**
 * The runtime the gateway trusts: at `gateway.delegation.runtimeUrl` when configured; otherwise the
 * runtime this process serves (`sigil up`), read directly; otherwise the runtime's public URL.
 */
function runtimeSource(config: AuthDeps['config'], inProcess: RuntimeSource | undefined): RuntimeSource {
  const configured = config.gateway.delegation.runtimeUrl;
  if (configured !== undefined) return new HttpRuntimeSource(configured);
  return inProcess ?? new HttpRuntimeSource(publicBaseUrl(config.runtime).href);
}
