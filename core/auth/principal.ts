import type { Context, Next } from 'koa';
import { SigilError } from '@sigil/plugin-api';
import type { RuntimeTrust } from './delegation/trust.ts';

/**
 * `jwt`: the service's own session JWT; `wallet-token`: a gateway wallet token; `erc8128`: a signed
 * request; `delegated-jwt`: the runtime's per-wallet JWT at the gateway (the delegated path);
 * `operator-on-behalf`: an operator's signed request acting for a wallet (the operator path).
 */
export type AuthMethod = 'jwt' | 'wallet-token' | 'erc8128' | 'delegated-jwt' | 'operator-on-behalf';

/** Who made the request, as established by the authentication middleware. */
export interface AuthPrincipal {
  /** EIP-55 checksummed wallet address. */
  address: `0x${string}`;
  method: AuthMethod;
  /** Never for a delegated JWT nor on behalf of a wallet: operator actions take the operator's own signature or session. */
  operator: boolean;
  /** The session a session JWT belongs to (its `jti`) and when it ends; only for `jwt`. */
  session?: { id: string; expiresAt: Date };
  /** How far the gateway trusts the runtime that issued a delegated JWT; only for `delegated-jwt`. */
  trust?: RuntimeTrust;
  /** The operator wallet that signed for `address`; only for `operator-on-behalf`. */
  actingOperator?: `0x${string}`;
}

/** What the authentication middleware (or lane step) leaves for the routes after it. */
interface AuthState {
  auth?: AuthPrincipal;
  /** Why presented credentials were refused; kept so protected routes report it instead of a bare 401. */
  authError?: SigilError;
}

declare module 'koa' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- declaration merging
  interface DefaultState extends AuthState {}
}

declare module '../http/lane.ts' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- declaration merging
  interface LaneState extends AuthState {}
}

export const unauthorized = (message: string, details?: Record<string, unknown>): SigilError =>
  new SigilError('unauthorized', message, {
    hint: 'Sign in with GET challenge and POST verify, then send Authorization: Bearer <token>, or sign the request with ERC-8128',
    ...(details === undefined ? {} : { details }),
  });

export interface RequireAuthOptions {
  /** Accepted methods; others get 403 (e.g. a wallet token may not mint more wallet tokens). */
  methods?: readonly AuthMethod[];
}

/** Guards a route: 401 with the reason credentials were refused, or 403 for a method the route excludes. */
export function requireAuth(options: RequireAuthOptions = {}) {
  return async (ctx: Context, next: Next): Promise<void> => {
    const principal = ctx.state.auth;
    if (principal === undefined) throw ctx.state.authError ?? unauthorized('Authentication required');
    if (options.methods !== undefined && !options.methods.includes(principal.method)) {
      throw new SigilError('forbidden', `This route does not accept ${principal.method} authentication`, {
        hint: `Authenticate with one of: ${options.methods.join(', ')}`,
      });
    }
    await next();
  };
}
