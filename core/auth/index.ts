import type Router from '@koa/router';
import type { Middleware } from 'koa';
import type { LaneStep } from '../http/lane.ts';
import type { Logger } from '../log.ts';
import type { RuntimeTrust } from './delegation/trust.ts';
import { DelegationVerifier, type DelegationVerifierOptions } from './delegation/verifier.ts';
import { RequestSignatures } from './erc8128.ts';
import { authenticate, authenticateLane } from './middleware.ts';
import { bearerChallenge } from './challenge.ts';
import type { AuthChallenge } from '../http/errors.ts';
import { protectedResourceRouter } from './resource-metadata.ts';
import { authRouter } from './router.ts';
import { SessionJwts } from './session-jwt.ts';
import { authSettings, type AuthDeps, type ServiceAuth } from './settings.ts';
import { SigningKeyStore } from './signing-key.ts';
import { SiweChallenges } from './siwe.ts';
import { WalletTokens } from './wallet-tokens.ts';

export { requireAuth, type AuthMethod, type AuthPrincipal, type RequireAuthOptions } from './principal.ts';
export { WALLET_TOKEN_PREFIX } from './wallet-tokens.ts';
export { TRUST_HEADER } from './middleware.ts';
export type { EvidenceVerifier, RuntimeTrust, TrustState } from './delegation/trust.ts';
export type { AuthDeps, ServiceAuth } from './settings.ts';

export interface WalletAuth {
  /** App-wide middleware that sets `ctx.state.auth`; put it before every router. */
  middleware: Middleware;
  /** The same for a lane: sets `state.auth` of each exchange. */
  laneStep: LaneStep;
  /** The service's sign-in routes. */
  router: Router;
  /** The `WWW-Authenticate` of the service's 401 answers. */
  challenge: AuthChallenge;
  /** The protected-resource metadata (RFC 9728), which MCP clients read after a 401, when published. */
  resourceMetadata?: Router;
  /** The trust of the runtime whose delegated JWTs this service accepts, when it accepts them. */
  runtimeTrust?: () => Promise<RuntimeTrust>;
  /** Refuses (config_invalid) a public URL that sign-in messages cannot carry: the service's start awaits it. */
  assertPublicUrlFits(): Promise<void>;
}

/** The delegated JWTs a service accepts: whose, where their keys and attestation are read, how trusted. */
export type DelegationOptions = Pick<
  DelegationVerifierOptions,
  'source' | 'issuer' | 'cacheSeconds' | 'requireTrusted' | 'verifiers'
>;

export interface WalletAuthOptions {
  /** Accept another service's delegated JWTs (the gateway, the runtime's) as wallet auth. */
  delegation?: DelegationOptions;
  /**
   * Publish OAuth 2.0 protected-resource metadata (RFC 9728) and name it in 401s, as MCP servers do,
   * with the authorization server when one is known.
   */
  protectedResource?: { authorizationServer: string | undefined };
}

/** Wallet authentication for one service: what the service decides, with the shared `auth` settings. */
export function createWalletAuth(
  deps: AuthDeps & { logger: Logger },
  service: ServiceAuth,
  options: WalletAuthOptions = {},
): WalletAuth {
  const settings = authSettings(deps.config.auth, service);
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
    delegated: options.delegation && delegationVerifier(deps, settings.baseUrl, options.delegation),
  };
  const { protectedResource } = options;
  const { delegated } = parts;
  return {
    middleware: authenticate(parts),
    laneStep: authenticateLane(parts),
    router: authRouter(parts),
    challenge: bearerChallenge(settings, protectedResource !== undefined),
    assertPublicUrlFits: () => parts.siwe.assertPublicUrlFits(),
    ...(protectedResource
      ? { resourceMetadata: protectedResourceRouter(settings, protectedResource.authorizationServer) }
      : {}),
    ...(delegated ? { runtimeTrust: () => delegated.trust() } : {}),
  };
}

/** The verifier of delegated JWTs addressed to this service (`audience`, its public base URL). */
function delegationVerifier(
  deps: AuthDeps & { logger: Logger },
  audience: string,
  delegation: DelegationOptions,
): DelegationVerifier {
  return new DelegationVerifier({
    ...delegation,
    audience,
    clockSkewSeconds: deps.config.auth.clockSkewSeconds,
    clock: deps.clock,
    logger: deps.logger.child({ component: 'delegation' }),
  });
}
