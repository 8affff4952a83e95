import { decodeJwt, decodeProtectedHeader, type JWTPayload, type ProtectedHeaderParameters } from 'jose';
import type { Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { parseSiweMessage } from 'viem/siwe';
import { z } from 'zod';
import { ensure, failWith } from '@sigil/plugin-api/kit';
import type { HttpResponse, ServiceName } from '../http.ts';
import type { DeploymentContext } from './context.ts';
import { expectJson, sameAddress } from './expect.ts';
import type { FeatureName } from './features.ts';

/**
 * Wallet sign-in (SIWE, EIP-4361) as a client does it, for both services: ask for a challenge, sign
 * its message with a wallet, exchange the signature for a JWT, and ask the service who it thinks we are.
 */

/** Where and how one service does wallet sign-in. */
export interface AuthSurface {
  service: ServiceName;
  /** Id prefix of this service's authentication requirements. */
  part: 'GW-5' | 'RT-5';
  /** The spec section its sign-in requirements come from. */
  spec: string;
  paths: { challenge: string; verify: string; session: string };
  /** Features needed to sign in at all, and to observe which credential a request authenticated with. */
  signInFeatures: readonly FeatureName[];
  sessionFeatures: readonly FeatureName[];
  /** The `aud` its session JWTs must carry, where the service fixes one. */
  audience?: string;
}

export const GATEWAY_AUTH: AuthSurface = {
  service: 'gateway',
  part: 'GW-5',
  spec: 'gateway spec part 5, rule 3 (challenge, verify, create token); part 4 REST endpoints /api/auth/*',
  paths: { challenge: '/api/auth/challenge', verify: '/api/auth/verify', session: '/api/auth/session' },
  signInFeatures: [],
  sessionFeatures: ['gateway-session'],
};

export const RUNTIME_AUTH: AuthSurface = {
  service: 'runtime',
  part: 'RT-5',
  spec: 'runtime spec part 5, rule 1 (a challenge and verify exchange yields a JWT session)',
  paths: { challenge: '/auth/challenge', verify: '/auth/verify', session: '/auth/session' },
  signInFeatures: ['runtime-wallet-auth'],
  sessionFeatures: ['runtime-wallet-auth'],
  audience: 'sigil:runtime',
};

const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address');
/** The specs do not say how times are written; an ISO string and a unix number are both accepted. */
const timestamp = z.union([z.string().min(1), z.number()]);

export const challengeSchema = z.object({
  nonce: z.string().min(8),
  message: z.string().min(1),
  domain: z.string().min(1),
  uri: z.string().min(1),
  chainId: z.number().int().positive(),
  issuedAt: timestamp,
  expiresAt: timestamp,
});
export type Challenge = z.infer<typeof challengeSchema>;

export const sessionTokenSchema = z.object({
  token: z.string().min(1),
  tokenType: z.literal('Bearer'),
  expiresAt: timestamp,
  expiresIn: z.number().int().positive(),
  address,
});

export const sessionSchema = z.object({ address });

/** A wallet made for one check: nobody else can hold a session for it, so checks cannot disturb each other. */
export function freshWallet(context: DeploymentContext): PrivateKeyAccount {
  const privateKey = generatePrivateKey();
  context.secret(privateKey);
  return privateKeyToAccount(privateKey);
}

export async function requestChallenge(
  context: DeploymentContext,
  surface: AuthSurface,
  wallet: PrivateKeyAccount,
): Promise<Challenge> {
  const path = `${surface.paths.challenge}?address=${wallet.address}`;
  const response = await context.http.request({ service: surface.service, path });
  return expectJson(response, 200, challengeSchema, `GET ${surface.paths.challenge}`);
}

/** What in a challenge's EIP-4361 message disagrees with the challenge body or the wallet that asked. */
export function siweMessageProblems(challenge: Challenge, wallet: PrivateKeyAccount): string[] {
  const message = parseSiweMessage(challenge.message);
  const problems: string[] = [];
  const expect = (holds: boolean, problem: string) => {
    if (!holds) problems.push(problem);
  };
  expect(message.version === '1', 'message has no EIP-4361 "Version: 1" line');
  expect(
    message.address !== undefined && sameAddress(message.address, wallet.address),
    'message names another address',
  );
  expect(message.nonce === challenge.nonce, 'message nonce differs from the body nonce');
  expect(message.chainId === challenge.chainId, 'message chain id differs from the body chainId');
  expect(message.domain === challenge.domain, 'message domain differs from the body domain');
  expect(message.uri === challenge.uri, 'message URI differs from the body uri');
  expect(message.issuedAt !== undefined, 'message has no "Issued At"');
  return problems;
}

export interface SignedChallenge {
  message: string;
  signature: Hex;
}

export async function signChallenge(
  wallet: PrivateKeyAccount,
  challenge: Challenge,
): Promise<SignedChallenge> {
  return { message: challenge.message, signature: await wallet.signMessage({ message: challenge.message }) };
}

/** The same signature with one hex digit of `r` changed: well-formed, but by no one. */
export function tamperedSignature(signature: Hex): Hex {
  const position = 10;
  const digit = signature.charAt(position) === '0' ? '1' : '0';
  return `${signature.slice(0, position)}${digit}${signature.slice(position + 1)}` as Hex;
}

export function postVerify(
  context: DeploymentContext,
  surface: AuthSurface,
  signed: SignedChallenge,
): Promise<HttpResponse> {
  return context.http.request({
    service: surface.service,
    method: 'POST',
    path: surface.paths.verify,
    json: signed,
  });
}

export interface DecodedJwt {
  header: ProtectedHeaderParameters;
  claims: JWTPayload;
}

export function decodeJwtOrFail(token: string, what: string): DecodedJwt {
  try {
    return { header: decodeProtectedHeader(token), claims: decodeJwt(token) };
  } catch {
    failWith(`${what} is not a JWT`);
  }
}

export interface SignedIn {
  wallet: PrivateKeyAccount;
  token: string;
  jwt: DecodedJwt;
}

/** The whole exchange, checked along the way; ends with a session JWT for `wallet`. */
export async function signIn(
  context: DeploymentContext,
  surface: AuthSurface,
  wallet: PrivateKeyAccount = freshWallet(context),
): Promise<SignedIn> {
  const signed = await signChallenge(wallet, await requestChallenge(context, surface, wallet));
  const response = await postVerify(context, surface, signed);
  const body = expectJson(response, 200, sessionTokenSchema, `POST ${surface.paths.verify}`);
  context.secret(body.token);
  ensure(
    sameAddress(body.address, wallet.address),
    `POST ${surface.paths.verify} answered address ${body.address}, not the signer ${wallet.address}`,
  );
  const jwt = decodeJwtOrFail(body.token, `the ${surface.service} session token`);
  context.evidence.note(`${surface.service} session JWT (decoded, signature omitted)`, {
    header: jwt.header,
    claims: jwt.claims,
  });
  return { wallet, token: body.token, jwt };
}

export const bearer = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` });

export function getSession(
  context: DeploymentContext,
  surface: AuthSurface,
  headers: Record<string, string> = {},
): Promise<HttpResponse> {
  return context.http.request({ service: surface.service, path: surface.paths.session, headers });
}

/** Positive control before a rejection test: without it, a 401 could mean the route rejects everyone. */
export async function expectSessionOf(
  context: DeploymentContext,
  surface: AuthSurface,
  headers: Record<string, string>,
  wallet: PrivateKeyAccount,
  what: string,
): Promise<z.infer<typeof sessionSchema>> {
  const response = await getSession(context, surface, headers);
  const session = expectJson(response, 200, sessionSchema, `${what} (GET ${surface.paths.session})`);
  ensure(
    sameAddress(session.address, wallet.address),
    `${what}: ${surface.paths.session} answered ${session.address}, expected ${wallet.address}`,
  );
  return session;
}
