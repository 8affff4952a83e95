import type { Context, Next } from 'koa';
import type { Address } from 'viem';
import { isSigilError } from '../errors.ts';
import type { DelegationVerifier } from './delegation/verifier.ts';
import { hasRequestSignature, type RequestSignatures } from './erc8128.ts';
import { unauthorized, type AuthMethod, type AuthPrincipal } from './principal.ts';
import type { SessionJwts } from './session-jwt.ts';
import type { AuthSettings } from './settings.ts';
import { isWalletToken, type WalletTokens } from './wallet-tokens.ts';

export interface Authenticators {
  settings: AuthSettings;
  sessions: SessionJwts;
  signatures: RequestSignatures;
  /** Absent where wallet tokens are not accepted (the runtime). */
  walletTokens: WalletTokens | undefined;
  /** The runtime's delegated JWTs; only at the gateway, and only when delegation is enabled. */
  delegated?: DelegationVerifier | undefined;
}

const BEARER = /^Bearer +(\S+)$/i;

/** The response header that tells a delegated caller how far the gateway trusts the runtime. */
export const TRUST_HEADER = 'X-Sigil-Runtime-Trust';

/**
 * Establishes who is calling from whatever credentials the request carries, and puts the principal in
 * `ctx.state.auth`. Refused credentials do not end the request here: public routes serve it anonymously,
 * and `requireAuth` reports the refusal (kept in `ctx.state.authError`) on protected ones.
 */
export function authenticate(auth: Authenticators) {
  return async (ctx: Context, next: Next): Promise<void> => {
    try {
      const principal = await identify(ctx, auth);
      if (principal) {
        ctx.state.auth = principal;
        if (principal.trust) {
          // Seen by the caller, on the request's log lines and on its access line.
          ctx.set(TRUST_HEADER, principal.trust.state);
          const state = ctx.state as { logFields?: Record<string, unknown> };
          state.logFields = {
            ...state.logFields,
            auth: principal.method,
            runtimeTrust: principal.trust.state,
          };
        }
      }
    } catch (err) {
      if (!isSigilError(err) || err.code !== 'unauthorized') throw err;
      ctx.state.authError = err;
    }
    await next();
  };
}

async function identify(ctx: Context, auth: Authenticators): Promise<AuthPrincipal | undefined> {
  const principal = (address: Address, method: AuthMethod): AuthPrincipal => ({
    address,
    method,
    operator: auth.settings.operators.has(address.toLowerCase()),
  });
  // A signature, when present, decides alone: a bearer token cannot rescue a bad one.
  if (hasRequestSignature(ctx)) return principal(await auth.signatures.verify(ctx), 'erc8128');
  const header = ctx.get('authorization');
  if (header === '') return undefined;
  const token = BEARER.exec(header)?.[1];
  if (token === undefined) throw unauthorized('Authorization must be "Bearer <token>"');
  let caller: AuthPrincipal;
  // Wallet tokens first, by their prefix: asking jose whether one is a JWT costs a thrown error per call.
  if (isWalletToken(token)) caller = principal(await walletTokenOwner(auth, token), 'wallet-token');
  else if (auth.delegated?.claims(token)) {
    const { address, trust } = await auth.delegated.verify(token);
    // The runtime speaks for the wallet, not for an operator: operator actions need the operator itself.
    return { address, method: 'delegated-jwt', operator: false, trust };
  } else {
    const session = await auth.sessions.verify(token);
    caller = {
      ...principal(session.address, 'jwt'),
      session: { id: session.id, expiresAt: session.expiresAt },
    };
  }
  if (caller.operator && auth.settings.enforceOperatorSignatures) {
    throw unauthorized('Operator wallets must sign requests with ERC-8128; bearer tokens are not accepted');
  }
  return caller;
}

function walletTokenOwner(auth: Authenticators, token: string): Promise<Address> {
  if (!auth.walletTokens) {
    throw unauthorized(`Wallet tokens are not accepted by the ${auth.settings.service}; use a session JWT`);
  }
  return auth.walletTokens.authenticate(token);
}
