import type { Context, Next } from 'koa';
import type { Address } from 'viem';
import { isSigilError, type SigilError } from '@sigil/plugin-api';
import type { IncomingRequest } from '../http/incoming.ts';
import type { LaneStep } from '../http/lane.ts';
import { incomingOfContext } from '../http/raw-body.ts';
import type { DelegationVerifier } from './delegation/verifier.ts';
import { hasRequestSignature, type RequestSignatures } from './erc8128.ts';
import { onBehalfOf } from './on-behalf-of.ts';
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

/** Who is calling, as established from a request's credentials, and what the answer shows of it. */
interface Identification {
  principal?: AuthPrincipal;
  /** Why presented credentials were refused (a 401 to report on protected routes). */
  error?: SigilError;
  /** For the caller, on the request's log lines and on its access line (the delegated path's trust). */
  trust?: { header: string; logFields: Record<string, unknown> };
}

/**
 * Establishes who is calling from whatever credentials the request carries. Refused credentials do not
 * end the request here: public routes serve it anonymously, and protected ones report the refusal.
 */
async function identification(request: IncomingRequest, auth: Authenticators): Promise<Identification> {
  try {
    const principal = await identify(request, auth);
    if (!principal?.trust) return { principal };
    const trust = principal.trust.state;
    return {
      principal,
      trust: { header: trust, logFields: { auth: principal.method, runtimeTrust: trust } },
    };
  } catch (err) {
    if (!isSigilError(err) || err.code !== 'unauthorized') throw err;
    return { error: err };
  }
}

/** Koa middleware: the principal in `ctx.state.auth`, a refusal in `ctx.state.authError`. */
export function authenticate(auth: Authenticators) {
  return async (ctx: Context, next: Next): Promise<void> => {
    const found = await identification(incomingOfContext(ctx, auth.settings.bodyLimitBytes), auth);
    if (found.principal) ctx.state.auth = found.principal;
    if (found.error) ctx.state.authError = found.error;
    if (found.trust) {
      ctx.set(TRUST_HEADER, found.trust.header);
      const state = ctx.state as { logFields?: Record<string, unknown> };
      state.logFields = { ...state.logFields, ...found.trust.logFields };
    }
    await next();
  };
}

/** The same as a lane step: the principal in `state.auth`, a refusal in `state.authError`. */
export function authenticateLane(auth: Authenticators): LaneStep {
  return async (exchange) => {
    const found = await identification(exchange.request, auth);
    if (found.principal) exchange.state.auth = found.principal;
    if (found.error) exchange.state.authError = found.error;
    if (found.trust) {
      exchange.setHeader(TRUST_HEADER, found.trust.header);
      exchange.logFields = { ...exchange.logFields, ...found.trust.logFields };
    }
  };
}

// A function of the module, not a closure made per request (tsx names each closure it makes).
const principal = (auth: Authenticators, address: Address, method: AuthMethod): AuthPrincipal => ({
  address,
  method,
  operator: auth.settings.operators.has(address.toLowerCase()),
});

async function identify(request: IncomingRequest, auth: Authenticators): Promise<AuthPrincipal | undefined> {
  // A signature, when present, decides alone: a bearer token cannot rescue a bad one.
  if (hasRequestSignature(request)) {
    const signed = await auth.signatures.verify(request);
    return (await onBehalfOf(request, auth.settings, signed)) ?? principal(auth, signed.signer, 'erc8128');
  }
  // A wallet named without a signature is refused, whatever the bearer token.
  await onBehalfOf(request, auth.settings, undefined);
  const header = request.header('authorization');
  if (header === '') return undefined;
  const token = BEARER.exec(header)?.[1];
  if (token === undefined) throw unauthorized('Authorization must be "Bearer <token>"');
  let caller: AuthPrincipal;
  // Wallet tokens first, by their prefix: asking jose whether one is a JWT costs a thrown error per call.
  if (isWalletToken(token)) caller = principal(auth, await walletTokenOwner(auth, token), 'wallet-token');
  else if (auth.delegated && (await auth.delegated.claims(token))) {
    const { address, trust } = await auth.delegated.verify(token);
    // The runtime speaks for the wallet, not for an operator: operator actions need the operator itself.
    return { address, method: 'delegated-jwt', operator: false, trust };
  } else {
    const session = await auth.sessions.verify(token);
    caller = {
      ...principal(auth, session.address, 'jwt'),
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
