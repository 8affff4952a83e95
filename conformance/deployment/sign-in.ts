import { UnsecuredJWT } from 'jose';
import { ensure, pass } from '@sigil/plugin-api/kit';
import type { Requirement } from './context.ts';
import { expectStatus } from './expect.ts';
import {
  bearer,
  expectSessionOf,
  freshWallet,
  getSession,
  postVerify,
  requestChallenge,
  signChallenge,
  signIn,
  siweMessageProblems,
  tamperedSignature,
  type AuthSurface,
} from './wallet.ts';

/**
 * Wallet sign-in requirements that hold for both services alike, generated per service so the gateway
 * (`GW-5.*`) and the runtime (`RT-5.*`) are held to exactly the same checks.
 */
export function signInRequirements(surface: AuthSurface): Requirement[] {
  const { service, part, paths } = surface;
  const signInBasics = {
    level: 'MUST',
    service,
    spec: surface.spec,
    features: surface.signInFeatures,
  } as const;
  const sessionBasics = {
    ...signInBasics,
    features: [...surface.signInFeatures, ...surface.sessionFeatures],
  };
  return [
    {
      ...signInBasics,
      id: `${part}.siwe-challenge`,
      title: `GET ${paths.challenge} issues an EIP-4361 message for the asking address`,
      check: async (context) => {
        const wallet = freshWallet(context);
        const challenge = await requestChallenge(context, surface, wallet);
        const problems = siweMessageProblems(challenge, wallet);
        ensure(
          problems.length === 0,
          `the challenge message is not a matching EIP-4361 message: ${problems.join('; ')}`,
        );
        return pass();
      },
    },
    {
      ...signInBasics,
      id: `${part}.siwe-verify`,
      title: `POST ${paths.verify} exchanges a signed challenge for a Bearer JWT of the signer`,
      check: async (context) => {
        const { jwt } = await signIn(context, surface);
        if (surface.audience !== undefined) {
          const audiences = [jwt.claims.aud ?? []].flat();
          ensure(
            audiences.includes(surface.audience),
            `the JWT audience is ${JSON.stringify(jwt.claims.aud)}, expected "${surface.audience}"`,
          );
        }
        return pass();
      },
    },
    {
      ...signInBasics,
      id: `${part}.siwe-nonce-single-use`,
      title: 'A signed challenge is accepted once; replaying it is refused with 401',
      spec: `${surface.spec}; EIP-4361 nonce (replay protection)`,
      check: async (context) => {
        const wallet = freshWallet(context);
        const signed = await signChallenge(wallet, await requestChallenge(context, surface, wallet));
        expectStatus(
          await postVerify(context, surface, signed),
          200,
          'the first use of the signed challenge',
        );
        expectStatus(await postVerify(context, surface, signed), 401, 'the replayed signed challenge');
        return pass();
      },
    },
    {
      ...signInBasics,
      id: `${part}.siwe-bad-signature`,
      title: 'A challenge with a signature that is not the wallet’s is refused with 401',
      check: async (context) => {
        const wallet = freshWallet(context);
        const signed = await signChallenge(wallet, await requestChallenge(context, surface, wallet));
        const tampered = { ...signed, signature: tamperedSignature(signed.signature) };
        expectStatus(await postVerify(context, surface, tampered), 401, 'a tampered signature');
        return pass();
      },
    },
    {
      ...sessionBasics,
      id: `${part}.session`,
      title: `The session JWT authenticates its wallet (GET ${paths.session})`,
      check: async (context) => {
        const { wallet, token } = await signIn(context, surface);
        await expectSessionOf(context, surface, bearer(token), wallet, 'the session JWT');
        return pass();
      },
    },
    {
      ...sessionBasics,
      id: `${part}.jwt-alg-none`,
      title: 'An unsigned JWT (`alg: none`) with valid claims is refused with 401',
      check: async (context) => {
        const { wallet, token, jwt } = await signIn(context, surface);
        await expectSessionOf(context, surface, bearer(token), wallet, 'the genuine session JWT');
        const unsigned = new UnsecuredJWT(jwt.claims).encode();
        expectStatus(
          await getSession(context, surface, bearer(unsigned)),
          401,
          'the same claims with alg none',
        );
        return pass();
      },
    },
  ];
}

/** A session JWT of one service must not authenticate at the other (gateway spec part 5; runtime spec part 5). */
export function foreignTokenRequirement(surface: AuthSurface, foreign: AuthSurface): Requirement {
  return {
    id: `${surface.part}.jwt-audience`,
    level: 'MUST',
    title: `A ${foreign.service} session JWT is refused by the ${surface.service} with 401`,
    spec: `${surface.spec}; session JWTs are scoped to the service that issued them (aud)`,
    service: surface.service,
    features: [...surface.signInFeatures, ...surface.sessionFeatures, ...foreign.signInFeatures],
    check: async (context) => {
      const own = await signIn(context, surface);
      await expectSessionOf(
        context,
        surface,
        bearer(own.token),
        own.wallet,
        `a ${surface.service} session JWT`,
      );
      const stranger = await signIn(context, foreign);
      expectStatus(
        await getSession(context, surface, bearer(stranger.token)),
        401,
        `a ${foreign.service} session JWT at the ${surface.service}`,
      );
      return pass();
    },
  };
}
