import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { z } from 'zod';
import { ensure, failWith, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { erc8128Headers, withTamperedSignature, type SignatureAudience } from './erc8128.ts';
import { expectJson, expectStatus, sameAddress } from './expect.ts';
import {
  bearer,
  expectSessionOf,
  freshWallet,
  GATEWAY_AUTH,
  getSession,
  requestChallenge,
  signIn,
} from './wallet.ts';

/**
 * Gateway authentication beyond sign-in (gateway spec part 5): the 24-hour JWT, wallet tokens, and
 * ERC-8128 request signatures with their precedence over bearer credentials.
 */

const SPEC_AUTH_METHODS = 'gateway spec part 5, authentication methods table';
const SPEC_PRECEDENCE = 'gateway spec part 5, rule 1 (ERC-8128 takes precedence over a bearer token)';
const SPEC_ENFORCEMENT = 'gateway spec part 5, rule 2 and part 7 (ERC8128_ENFORCE_OPERATOR_MCP)';
const JWT_LIFETIME_SECONDS = 24 * 60 * 60;
const WALLET_TOKEN_PREFIX = 'sigil_wt_';

const gatewaySessionSchema = z.object({
  address: z.string(),
  method: z.string(),
  operator: z.boolean(),
});

const walletTokenSchema = z.object({
  token: z.string().startsWith(WALLET_TOKEN_PREFIX),
  id: z.string().min(1),
  address: z.string(),
  label: z.string(),
  createdAt: z.union([z.string().min(1), z.number()]),
  prefix: z.literal(WALLET_TOKEN_PREFIX),
});

export interface WalletToken {
  wallet: PrivateKeyAccount;
  jwt: string;
  token: string;
  id: string;
}

/** Signs a fresh wallet in and creates a wallet token for it, checking the answer on the way. */
export async function createWalletToken(context: DeploymentContext): Promise<WalletToken> {
  const { wallet, token: jwt } = await signIn(context, GATEWAY_AUTH);
  const label = 'conformance';
  const response = await context.http.request({
    service: 'gateway',
    method: 'POST',
    path: '/api/auth/create-token',
    headers: bearer(jwt),
    json: { label },
  });
  const created = expectJson(response, 201, walletTokenSchema, 'POST /api/auth/create-token');
  context.secret(created.token);
  ensure(
    sameAddress(created.address, wallet.address),
    `the wallet token is for ${created.address}, not the caller`,
  );
  ensure(created.label === label, `the wallet token label is "${created.label}", not "${label}"`);
  return { wallet, jwt, token: created.token, id: created.id };
}

/** The chain and URL ERC-8128 signatures are for: those the gateway puts in its own SIWE challenges. */
async function gatewaySignatureAudience(context: DeploymentContext): Promise<SignatureAudience> {
  const challenge = await requestChallenge(context, GATEWAY_AUTH, freshWallet(context));
  return { chainId: challenge.chainId, baseUrl: challenge.uri };
}

interface SignedRequestOptions {
  /** Headers sent beside the signature, e.g. another wallet's bearer token. */
  alongside?: Record<string, string>;
  /** Flip a bit of the signature before sending, so it is well-formed but not the wallet's. */
  tampered?: boolean;
}

/** GET /api/auth/session signed by `wallet` with ERC-8128; returns the headers too, for a replay. */
async function signedSessionRequest(
  context: DeploymentContext,
  wallet: PrivateKeyAccount,
  { alongside = {}, tampered = false }: SignedRequestOptions = {},
): Promise<{ response: HttpResponse; headers: Record<string, string> }> {
  const signature = await erc8128Headers(context, wallet, await gatewaySignatureAudience(context), {
    method: 'GET',
    path: GATEWAY_AUTH.paths.session,
  });
  const headers = { ...alongside, ...(tampered ? withTamperedSignature(signature) : signature) };
  return { response: await getSession(context, GATEWAY_AUTH, headers), headers };
}

/** Fails unless the gateway answered 200 with a session of `wallet` authenticated by `method`. */
function expectGatewaySession(
  response: HttpResponse,
  wallet: PrivateKeyAccount,
  method: string,
  what: string,
) {
  const session = expectJson(response, 200, gatewaySessionSchema, what);
  ensure(
    sameAddress(session.address, wallet.address),
    `${what}: authenticated as ${session.address}, expected ${wallet.address}`,
  );
  ensure(session.method === method, `${what}: authenticated by "${session.method}", expected "${method}"`);
  return session;
}

const sessionFeatures = ['gateway-session'] as const;

export const gatewayAuthRequirements: readonly Requirement[] = [
  {
    id: 'GW-5.jwt-lifetime',
    level: 'MUST',
    title: 'Gateway session JWTs are ES256 and live 24 hours (exp - iat = 86400)',
    spec: 'gateway spec part 5 (JWT: short-lived session auth, 24 hours) and part 8 (JWT lifetime 24 hours)',
    service: 'gateway',
    check: async (context) => {
      const { jwt } = await signIn(context, GATEWAY_AUTH);
      ensure(jwt.header.alg === 'ES256', `the JWT is signed with ${String(jwt.header.alg)}, expected ES256`);
      const { iat, exp } = jwt.claims;
      ensure(typeof iat === 'number' && typeof exp === 'number', 'the JWT lacks a numeric iat or exp claim');
      ensure(
        exp - iat === JWT_LIFETIME_SECONDS,
        `the JWT lives ${exp - iat} s (exp - iat), expected ${JWT_LIFETIME_SECONDS}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-5.wallet-token-prefix',
    level: 'MUST',
    title: `POST /api/auth/create-token answers 201 with a wallet token starting "${WALLET_TOKEN_PREFIX}"`,
    spec: 'gateway spec part 2 (wallet token: bearer token with a fixed prefix) and part 5, rule 3',
    service: 'gateway',
    check: async (context) => {
      await createWalletToken(context);
      return pass();
    },
  },
  {
    id: 'GW-5.wallet-token-auth',
    level: 'MUST',
    title: 'A wallet token authenticates its wallet as a bearer token',
    spec: `${SPEC_AUTH_METHODS} (wallet token: long-lived MCP client auth)`,
    service: 'gateway',
    features: sessionFeatures,
    check: async (context) => {
      const { wallet, token } = await createWalletToken(context);
      const response = await getSession(context, GATEWAY_AUTH, bearer(token));
      expectGatewaySession(response, wallet, 'wallet-token', 'the wallet token');
      return pass();
    },
  },
  {
    id: 'GW-5.wallet-token-revocable',
    level: 'SHOULD',
    title: 'DELETE /api/auth/tokens/:id answers 204 and the token is refused afterwards',
    spec: `${SPEC_AUTH_METHODS}: a long-lived credential needs a way to withdraw it`,
    service: 'gateway',
    features: sessionFeatures,
    check: async (context) => {
      const { wallet, jwt, token, id } = await createWalletToken(context);
      await expectSessionOf(
        context,
        GATEWAY_AUTH,
        bearer(token),
        wallet,
        'the wallet token before revocation',
      );
      const revoked = await context.http.request({
        service: 'gateway',
        method: 'DELETE',
        path: `/api/auth/tokens/${encodeURIComponent(id)}`,
        headers: bearer(jwt),
      });
      expectStatus(revoked, 204, 'DELETE /api/auth/tokens/:id');
      expectStatus(await getSession(context, GATEWAY_AUTH, bearer(token)), 401, 'the revoked wallet token');
      return pass();
    },
  },
  {
    id: 'GW-5.erc8128-precedence',
    level: 'MUST',
    title: 'With an ERC-8128 signature of wallet B and a bearer JWT of wallet A, the request is B’s',
    spec: SPEC_PRECEDENCE,
    service: 'gateway',
    features: sessionFeatures,
    check: async (context) => {
      const holderOfBearer = await signIn(context, GATEWAY_AUTH);
      const signer = freshWallet(context);
      const { response } = await signedSessionRequest(context, signer, {
        alongside: bearer(holderOfBearer.token),
      });
      expectGatewaySession(response, signer, 'erc8128', 'a request with both credentials');
      return pass();
    },
  },
  {
    id: 'GW-5.erc8128-invalid-signature',
    level: 'MUST',
    title: 'An invalid ERC-8128 signature is refused with 401 even beside a valid bearer JWT',
    spec: `${SPEC_PRECEDENCE}: a signature that takes precedence cannot be skipped when it fails`,
    service: 'gateway',
    features: sessionFeatures,
    check: async (context) => {
      const holderOfBearer = await signIn(context, GATEWAY_AUTH);
      await expectSessionOf(
        context,
        GATEWAY_AUTH,
        bearer(holderOfBearer.token),
        holderOfBearer.wallet,
        'the bearer alone',
      );
      const { response } = await signedSessionRequest(context, freshWallet(context), {
        alongside: bearer(holderOfBearer.token),
        tampered: true,
      });
      expectStatus(response, 401, 'a tampered ERC-8128 signature beside a valid bearer');
      return pass();
    },
  },
  {
    id: 'GW-5.erc8128-replay',
    level: 'MUST',
    title: 'An ERC-8128 signed request is accepted once; replaying it (same nonce) is refused with 401',
    spec: `${SPEC_AUTH_METHODS} (ERC-8128: hardened auth; its nonce gives replay protection)`,
    service: 'gateway',
    features: sessionFeatures,
    check: async (context) => {
      const signer = freshWallet(context);
      const { response, headers } = await signedSessionRequest(context, signer);
      expectGatewaySession(response, signer, 'erc8128', 'the first use of a signed request');
      expectStatus(await getSession(context, GATEWAY_AUTH, headers), 401, 'the replayed signed request');
      return pass();
    },
  },
  {
    id: 'GW-5.erc8128-operator-enforced',
    level: 'MUST',
    title: 'Where enforced, a bearer-only request of an operator wallet is refused with 401',
    spec: SPEC_ENFORCEMENT,
    service: 'gateway',
    features: sessionFeatures,
    check: checkOperatorEnforcement,
  },
];

/**
 * Whether bearer-only requests of operators are refused cannot be seen from outside without being an
 * operator, so the tester lends one operator key (`--operator-key` or SIGIL_CONFORMANCE_OPERATOR_KEY).
 * Then, in order:
 * 1. an ERC-8128 request signed by the operator must be answered as an operator (else the key is wrong);
 * 2. the operator signs in and sends its JWT alone: 401 means the gateway enforces, 200 that it does not;
 * 3. when it enforces, a non-operator's bearer-only request must still pass: enforcement is about operators.
 * A gateway that does not enforce is not applicable, unless the tester says it should
 * (`--expect-operator-enforcement`), which makes it a failure.
 */
async function checkOperatorEnforcement(context: DeploymentContext) {
  const { operatorKey, expectOperatorEnforcement } = context.target;
  if (operatorKey === undefined) {
    notApplicableBecause(
      'no operator key given (--operator-key or SIGIL_CONFORMANCE_OPERATOR_KEY): a black box cannot know the operator wallets',
    );
  }
  context.secret(operatorKey);
  const operator = privateKeyToAccount(operatorKey);
  const { response } = await signedSessionRequest(context, operator);
  const asOperator = expectGatewaySession(response, operator, 'erc8128', 'the operator’s ERC-8128 request');
  ensure(
    asOperator.operator,
    `the operator key's wallet ${operator.address} is not an operator of this gateway (session says operator: false)`,
  );
  const { token } = await signIn(context, GATEWAY_AUTH, operator);
  const bearerOnly = await getSession(context, GATEWAY_AUTH, bearer(token));
  if (bearerOnly.status === 200) {
    const finding = `the gateway accepted a bearer-only request of operator ${operator.address}, so it does not enforce ERC-8128 for operators (ERC8128_ENFORCE_OPERATOR_MCP off)`;
    if (expectOperatorEnforcement) failWith(`${finding}, but --expect-operator-enforcement says it should`);
    notApplicableBecause(`${finding}; pass --expect-operator-enforcement to require it`);
  }
  expectStatus(bearerOnly, 401, 'a bearer-only request of an operator');
  const someone = await signIn(context, GATEWAY_AUTH);
  await expectSessionOf(
    context,
    GATEWAY_AUTH,
    bearer(someone.token),
    someone.wallet,
    'a bearer-only request of a non-operator while enforcement is on',
  );
  return pass();
}
