import { createPublicKey, generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import { createLocalJWKSet, jwtVerify, SignJWT, type JWK } from 'jose';
import type { PrivateKeyAccount } from 'viem/accounts';
import { z } from 'zod';
import { ensure, failWith, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import { boundIdentity, freshNonce, judgeReport, reportSchema, requestReport } from './attestation/report.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectJson, sameAddress } from './expect.ts';
import { JWKS_PATH, jwksHashPrefixes, readJwks } from './jwks.ts';
import {
  bearer,
  decodeJwtOrFail,
  expectSessionOf,
  freshWallet,
  GATEWAY_AUTH,
  getSession,
  requestChallenge,
  RUNTIME_AUTH,
  signIn,
  type DecodedJwt,
} from './wallet.ts';

/**
 * The delegated path (runtime spec parts 2, 3 and 5): the runtime's ES256 JWKS, per-wallet JWTs the
 * gateway verifies through it, and the trust state the gateway assigns to the runtime, set against
 * what the runner finds verifying the runtime's report itself.
 *
 * A black box cannot sign as the runtime, so the runner asks Sigil's runtime for a delegated JWT for
 * its own wallet (`POST /wallet/gateway-token`; not applicable where a runtime has no such route), and
 * proves refusals with tokens it can make: another key under the runtime's kid, a genuine token with
 * claims altered, and algorithm confusion. A genuine token's expiry and audience are checked by
 * decoding it; that an expired or wrongly addressed genuine token is refused is left to tests that
 * hold the key (a black box cannot wait out the lifetime or sign for another audience).
 */

const TOKEN_PATH = '/wallet/gateway-token';
/** Short lived: the runner accepts up to 15 minutes (Sigil mints 5). */
const MAX_LIFETIME_SECONDS = 900;
const TRUST_STATES = ['trusted', 'degraded_hash_mismatch', 'degraded_no_attestation'] as const;
const TRUST_HEADER = 'x-sigil-runtime-trust';

const SPEC_JWKS =
  'runtime spec part 2 (signing key (public): an ES256 public key published as a JWKS document) and part 4 (GET /.well-known/jwks.json)';
const SPEC_DELEGATED =
  'runtime spec part 1 and part 5, rule 4 (per-wallet ES256 JWTs signed with MCP_SIGNING_KEY) and rule 5 (the gateway verifies them through the JWKS)';
const SPEC_TRUST =
  'runtime spec part 3 (cross-gateway trust, as judged by the tool gateway: trusted, degraded_hash_mismatch, degraded_no_attestation) and part 5, rule 5';
const tokenSchema = z.looseObject({ token: z.string().min(1) });
const sessionSchema = z.looseObject({ address: z.string(), trust: z.string().optional() });

const PRIVATE_PARAMETERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k'];

interface Delegated {
  wallet: PrivateKeyAccount;
  token: string;
  jwt: DecodedJwt;
}

/** A fresh wallet signs in to the runtime and asks it for a delegated JWT. */
async function delegatedToken(context: DeploymentContext): Promise<Delegated> {
  const { wallet, token: session } = await signIn(context, RUNTIME_AUTH);
  const response = await context.http.request({
    service: 'runtime',
    method: 'POST',
    path: TOKEN_PATH,
    headers: bearer(session),
  });
  if (response.status === 404) {
    notApplicableBecause(
      `the runtime hands out no delegated JWT to a wallet (POST ${TOKEN_PATH} answered 404; the spec does not fix how a tester obtains one)`,
    );
  }
  const { token } = expectJson(response, 200, tokenSchema, `POST ${TOKEN_PATH}`);
  context.secret(token);
  const jwt = decodeJwtOrFail(token, 'the delegated token');
  context.evidence.note('delegated JWT (decoded, signature omitted)', {
    header: jwt.header,
    claims: jwt.claims,
  });
  return { wallet, token, jwt };
}

/** The gateway's public URL, as its SIWE challenges name it: what delegated JWTs are addressed to. */
async function gatewayIdentifier(context: DeploymentContext): Promise<string> {
  return (await requestChallenge(context, GATEWAY_AUTH, freshWallet(context))).uri;
}

/** Fails unless the gateway refuses `token` with 401. */
async function expectRefused(context: DeploymentContext, token: string, what: string): Promise<void> {
  const response = await getSession(context, GATEWAY_AUTH, bearer(token));
  if (response.status === 401) return;
  failWith(`the gateway accepted ${what} (GET /api/auth/session answered ${response.status}, expected 401)`);
}

const b64url = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');

/** The gateway's trust state for a delegated caller: from the session body or the response header. */
function trustOf(response: HttpResponse): string | undefined {
  const body = response.body as { trust?: unknown } | undefined;
  const fromBody = typeof body?.trust === 'string' ? body.trust : undefined;
  return fromBody ?? response.headers.get(TRUST_HEADER) ?? undefined;
}

/**
 * Why the runner, having verified a fresh report of the runtime itself, finds the gateway may not call
 * the runtime `state`; undefined when it may. The runner only contradicts: a gateway may judge a
 * runtime the runner finds sound degraded (it may lack a verifier, or pin attestation keys).
 */
async function contradiction(context: DeploymentContext, state: string): Promise<string | undefined> {
  const nonce = freshNonce();
  const response = await requestReport(context, 'runtime', nonce);
  // A runtime serving no report fails the attestation requirements; here there is nothing to compare.
  if (response.status !== 200) return undefined;
  const reading = judgeReport(context, expectJson(response, 200, reportSchema, 'the runtime report'), nonce);
  switch (reading.kind) {
    case 'no-evidence':
      return state === 'degraded_no_attestation'
        ? undefined
        : `the runtime has no attestation evidence, yet the gateway judges it "${state}"`;
    case 'unverifiable':
      return undefined;
    case 'refused':
      return state === 'trusted'
        ? `the runtime's report does not stand for the runner (${reading.reason}), yet the gateway judges it "trusted"`
        : undefined;
    case 'bound': {
      const bound = boundIdentity(reading.reportData);
      if (state !== 'trusted' || jwksHashPrefixes(await readJwks(context)).includes(bound)) return undefined;
      return `the runtime's verified report binds ${bound} at REPORT_DATA[32:48], not its JWKS hash, yet the gateway judges it "trusted"`;
    }
  }
}

const delegatedFeatures = ['runtime-wallet-auth', 'gateway-session'] as const;

export const delegationRequirements: readonly Requirement[] = [
  {
    id: 'RT-2.jwks-es256',
    level: 'MUST',
    title: `GET ${JWKS_PATH} publishes ES256 public keys (EC P-256), each with a distinct kid and no private part`,
    spec: SPEC_JWKS,
    service: 'runtime',
    check: async (context) => {
      const { document } = await readJwks(context);
      ensure(document.keys.length > 0, 'the JWKS has no keys');
      const kids = new Set<string>();
      for (const [index, key] of document.keys.entries()) {
        const where = `keys[${index}]`;
        ensure(
          key.kty === 'EC' && key.crv === 'P-256',
          `${where} is ${key.kty} ${key.crv ?? ''}, not EC P-256 (ES256)`,
        );
        ensure(key.alg === undefined || key.alg === 'ES256', `${where} is for ${key.alg}, not ES256`);
        ensure(typeof key.kid === 'string' && key.kid !== '', `${where} has no kid`);
        ensure(!kids.has(key.kid), `${where} repeats kid ${key.kid}`);
        kids.add(key.kid);
        const leaked = PRIVATE_PARAMETERS.filter((name) => name in key);
        ensure(leaked.length === 0, `${where} publishes private parameters: ${leaked.join(', ')}`);
        try {
          createPublicKey({ key: key as JsonWebKey, format: 'jwk' });
        } catch {
          failWith(`${where} is not a usable EC public key`);
        }
      }
      return pass();
    },
  },
  {
    id: 'RT-5.delegated-jwt',
    level: 'MUST',
    title:
      'A delegated JWT is ES256, names a kid of the JWKS, verifies against it, has the wallet as subject and the gateway as audience, and lives at most 15 minutes',
    spec: SPEC_DELEGATED,
    service: 'runtime',
    features: ['runtime-wallet-auth'],
    check: async (context) => {
      const { wallet, token, jwt } = await delegatedToken(context);
      const { document } = await readJwks(context);
      ensure(
        jwt.header.alg === 'ES256',
        `the delegated JWT is signed with ${String(jwt.header.alg)}, not ES256`,
      );
      ensure(typeof jwt.header.kid === 'string', 'the delegated JWT has no kid');
      ensure(
        document.keys.some((key) => key.kid === jwt.header.kid),
        `the delegated JWT's kid ${jwt.header.kid} is not in the JWKS`,
      );
      try {
        await jwtVerify(token, createLocalJWKSet({ keys: document.keys as JWK[] }), {
          algorithms: ['ES256'],
          currentDate: new Date((jwt.claims.iat ?? Math.floor(Date.now() / 1000)) * 1000),
        });
      } catch (err) {
        failWith(`the delegated JWT does not verify against the JWKS: ${(err as Error).message}`);
      }
      const subject = jwt.claims.sub ?? '';
      ensure(
        sameAddress(subject, wallet.address),
        `the subject is ${subject}, not the wallet ${wallet.address}`,
      );
      const gateway = await gatewayIdentifier(context);
      const audiences = [jwt.claims.aud ?? []].flat();
      ensure(
        audiences.includes(gateway),
        `the audience is ${audiences.join(', ') || 'absent'}, not the gateway (${gateway})`,
      );
      const { iat, exp } = jwt.claims;
      ensure(
        typeof iat === 'number' && typeof exp === 'number',
        'the delegated JWT lacks a numeric iat or exp',
      );
      ensure(
        exp - iat > 0 && exp - iat <= MAX_LIFETIME_SECONDS,
        `the delegated JWT lives ${exp - iat} s (exp - iat), more than ${MAX_LIFETIME_SECONDS} s`,
      );
      return pass();
    },
  },
  {
    id: 'GW-5.delegated-jwt-accepted',
    level: 'MUST',
    title: "The gateway accepts the runtime's delegated JWT as the wallet's authentication",
    spec: SPEC_DELEGATED,
    service: 'gateway',
    features: delegatedFeatures,
    check: async (context) => {
      const { wallet, token } = await delegatedToken(context);
      await expectSessionOf(context, GATEWAY_AUTH, bearer(token), wallet, 'the delegated JWT');
      return pass();
    },
  },
  {
    id: 'GW-5.delegated-jwt-refused',
    level: 'MUST',
    title:
      "The gateway refuses forged delegated JWTs: another key under the runtime's kid, altered subject, audience or expiry, alg none, HS256 keyed with the public key, RS256",
    spec: `${SPEC_DELEGATED}; RFC 8725 (JWT best current practices: algorithm verification)`,
    service: 'gateway',
    features: delegatedFeatures,
    check: async (context) => {
      const { wallet, token, jwt } = await delegatedToken(context);
      // Positive control: the genuine token passes, so a 401 below is about the forgery.
      await expectSessionOf(context, GATEWAY_AUTH, bearer(token), wallet, 'the genuine delegated JWT');
      const { document } = await readJwks(context);
      const published = document.keys.find((key) => key.kid === jwt.header.kid);
      if (published === undefined) failWith(`the delegated JWT's kid ${jwt.header.kid} is not in the JWKS`);
      const header = { ...jwt.header };
      const [encodedHeader, , signature] = token.split('.') as [string, string, string];
      const now = Math.floor(Date.now() / 1000);
      const other = freshWallet(context).address;

      const stranger = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
      await expectRefused(
        context,
        await new SignJWT(jwt.claims).setProtectedHeader(header as never).sign(stranger),
        "a token signed by another key under the runtime's kid",
      );
      for (const [what, claims] of [
        ['the genuine token with another subject', { ...jwt.claims, sub: other }],
        [
          'the genuine token addressed to another audience',
          { ...jwt.claims, aud: 'https://elsewhere.example' },
        ],
        ['the genuine token with its expiry moved to the past', { ...jwt.claims, exp: now - 3600 }],
      ] as const) {
        await expectRefused(context, `${encodedHeader}.${b64url(claims)}.${signature}`, what);
      }
      await expectRefused(
        context,
        `${b64url({ ...header, alg: 'none' })}.${b64url(jwt.claims)}.`,
        'alg none',
      );
      const publicKey = createPublicKey({ key: published as JsonWebKey, format: 'jwk' });
      for (const [what, secret] of [
        ['HS256 keyed with the JWK', JSON.stringify(published)],
        ['HS256 keyed with the PEM public key', publicKey.export({ format: 'pem', type: 'spki' }) as string],
      ] as const) {
        await expectRefused(
          context,
          await new SignJWT(jwt.claims)
            .setProtectedHeader({ ...header, alg: 'HS256' } as never)
            .sign(new TextEncoder().encode(secret)),
          what,
        );
      }
      const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
      await expectRefused(
        context,
        await new SignJWT(jwt.claims).setProtectedHeader({ ...header, alg: 'RS256' } as never).sign(rsa),
        'RS256 with a key of its own',
      );
      return pass();
    },
  },
  {
    id: 'RT-3.trust-state-reported',
    level: 'MUST',
    title:
      "The gateway reports a trust state for the runtime of a delegated caller (trusted, degraded_hash_mismatch or degraded_no_attestation): degraded_no_attestation when the runtime has no attestation, and never trusted when the runner's own verification of the runtime's report fails",
    spec: SPEC_TRUST,
    service: 'gateway',
    features: delegatedFeatures,
    check: async (context) => {
      const { token } = await delegatedToken(context);
      const response = await getSession(context, GATEWAY_AUTH, bearer(token));
      expectJson(response, 200, sessionSchema, 'GET /api/auth/session with the delegated JWT');
      const state = trustOf(response);
      if (state === undefined) {
        notApplicableBecause(
          `the gateway shows no trust state (no "trust" in GET /api/auth/session, no ${TRUST_HEADER} header), so it cannot be observed`,
        );
      }
      ensure(
        (TRUST_STATES as readonly string[]).includes(state),
        `the trust state is "${state}", not one of ${TRUST_STATES.join(', ')}`,
      );
      const header = response.headers.get(TRUST_HEADER);
      ensure(
        header === null || header === state,
        `the ${TRUST_HEADER} header says ${header}, the session ${state}`,
      );
      const contradicted = await contradiction(context, state);
      if (contradicted !== undefined) failWith(contradicted);
      return pass();
    },
  },
];
