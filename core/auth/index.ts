import type Router from '@koa/router';
import type { Middleware } from 'koa';
import { RequestSignatures } from './erc8128.ts';
import { authenticate } from './middleware.ts';
import { authRouter } from './router.ts';
import { SessionJwts } from './session-jwt.ts';
import { authSettings, type AuthDeps, type AuthService } from './settings.ts';
import { SigningKeyStore } from './signing-key.ts';
import { SiweChallenges } from './siwe.ts';
import { WalletTokens } from './wallet-tokens.ts';

export { requireAuth, type AuthMethod, type AuthPrincipal, type RequireAuthOptions } from './principal.ts';
export { WALLET_TOKEN_PREFIX } from './wallet-tokens.ts';
export type { AuthDeps, AuthService } from './settings.ts';

export interface WalletAuth {
  /** App-wide middleware that sets `ctx.state.auth`; put it before every router. */
  middleware: Middleware;
  /** The service's sign-in routes. */
  router: Router;
}

/** Wallet authentication for one service; the gateway and the runtime differ only by `service`. */
export function createWalletAuth(deps: AuthDeps, service: AuthService): WalletAuth {
  const settings = authSettings(deps.config, service);
  const keys = new SigningKeyStore(deps.db, deps.clock, deps.secrets, deps.config.auth.jwtSigningKey);
  const parts = {
    settings,
    siwe: new SiweChallenges(deps.db, deps.clock, settings),
    sessions: new SessionJwts(keys, deps.clock, settings),
    signatures: new RequestSignatures(deps.db, deps.clock, settings),
    walletTokens: settings.walletTokens ? new WalletTokens(deps.db, deps.clock) : undefined,
  };
  return { middleware: authenticate(parts), router: authRouter(parts) };
}
