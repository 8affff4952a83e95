import Router from '@koa/router';
import type { Context } from 'koa';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import { parseInput } from '../http/validate.ts';
import type { Authenticators } from './middleware.ts';
import { requireAuth, type AuthPrincipal } from './principal.ts';
import type { SiweChallenges } from './siwe.ts';
import { WALLET_TOKEN_PREFIX, type WalletTokens } from './wallet-tokens.ts';

// Checksummed by the challenge it is put in (viem is imported then, not at start-up).
const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address');

export const challengeQuery = z.object({ address });

export const verifyBody = z
  .object({
    message: z.string().min(1).max(4096),
    // 65-byte (r, s, v) or 64-byte EIP-2098 compact EOA signatures.
    signature: z
      .string()
      .regex(/^0x(?:[0-9a-fA-F]{128}|[0-9a-fA-F]{130})$/, 'must be a hex EOA signature')
      .transform((value) => value as `0x${string}`),
  })
  .strict();

export const createTokenBody = z.object({ label: z.string().trim().min(1).max(100).optional() }).strict();

export const tokenParams = z.object({ id: z.uuid() });

/** Wallet tokens are minted and managed only by a wallet-signed session, so a leaked token cannot breed. */
const SIGNED_SESSION = requireAuth({ methods: ['jwt', 'erc8128'] });

function caller(ctx: Context): AuthPrincipal {
  const principal = ctx.state.auth;
  if (principal === undefined) throw new SigilError('internal', 'Route reached without requireAuth');
  return principal;
}

export interface AuthRoutes extends Authenticators {
  siwe: SiweChallenges;
}

/**
 * The sign-in routes of one service: `challenge`, `verify` and `session` under its prefix (`/api/auth`
 * on the gateway, `/auth` on the runtime), plus wallet-token management where tokens are accepted.
 */
export function authRouter(auth: AuthRoutes): Router {
  const router = new Router({ prefix: auth.settings.routePrefix });
  router.get('/challenge', async (ctx) => {
    const query = parseInput(challengeQuery, ctx.query, 'query');
    ctx.body = await auth.siwe.issue(query.address);
  });
  router.post('/verify', async (ctx) => {
    const body = parseInput(verifyBody, ctx.request.body, 'body');
    const wallet = await auth.siwe.verify(body.message, body.signature);
    const session = await auth.sessions.issue(wallet);
    ctx.body = {
      token: session.token,
      tokenType: 'Bearer',
      expiresAt: session.expiresAt.toISOString(),
      expiresIn: session.expiresIn,
      address: wallet,
    };
  });
  router.get('/session', requireAuth(), (ctx) => {
    const { address: wallet, method, operator, trust, actingOperator } = caller(ctx);
    ctx.body = {
      address: wallet,
      method,
      operator,
      // The operator path: the operator wallet that acts for this wallet.
      ...(actingOperator === undefined ? {} : { actingOperator }),
      // The delegated path: how far this gateway trusts the runtime that vouched for the wallet.
      ...(trust === undefined
        ? {}
        : {
            trust: trust.state,
            trustReason: trust.reason,
            trustPlatform: trust.platform,
            runtimeJwksSha256: trust.jwksSha256,
          }),
    };
  });
  if (auth.walletTokens) walletTokenRoutes(router, auth.walletTokens);
  return router;
}

function walletTokenRoutes(router: Router, tokens: WalletTokens): void {
  router.post('/create-token', SIGNED_SESSION, async (ctx) => {
    const body = parseInput(createTokenBody, ctx.request.body ?? {}, 'body');
    const wallet = caller(ctx).address;
    const { token, info } = await tokens.create(wallet, body.label);
    ctx.status = 201;
    ctx.body = {
      token,
      id: info.id,
      address: wallet,
      label: info.label,
      createdAt: info.createdAt,
      prefix: WALLET_TOKEN_PREFIX,
    };
  });
  router.get('/tokens', SIGNED_SESSION, async (ctx) => {
    ctx.body = { tokens: await tokens.list(caller(ctx).address) };
  });
  router.delete('/tokens/:id', SIGNED_SESSION, async (ctx) => {
    const params = parseInput(tokenParams, ctx.params, 'params');
    await tokens.revoke(caller(ctx).address, params.id);
    ctx.status = 204;
  });
}
