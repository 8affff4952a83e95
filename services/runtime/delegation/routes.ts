import Router from '@koa/router';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import type { DelegationKeys } from '../../../core/auth/delegation/keys.ts';

/**
 * `GET /.well-known/jwks.json`: the public keys of the delegated path (current first, then the one it
 * replaced during a rotation). `POST /wallet/gateway-token`: a delegated JWT for the signed-in wallet,
 * for the gateway at `audience`, so a wallet's own client can use the gateway as the runtime does.
 */
export function delegationRouter(keys: DelegationKeys, audience: string): Router {
  const router = new Router();
  router.get('/.well-known/jwks.json', async (ctx) => {
    ctx.set('Cache-Control', 'public, max-age=60');
    ctx.body = await keys.jwks();
  });
  router.post('/wallet/gateway-token', requireAuth(), async (ctx) => {
    const wallet = (ctx.state.auth as AuthPrincipal).address;
    const minted = await keys.sign(wallet, audience);
    ctx.set('Cache-Control', 'no-store');
    ctx.body = {
      token: minted.token,
      tokenType: 'Bearer',
      audience: minted.audience,
      kid: minted.kid,
      expiresAt: minted.expiresAt.toISOString(),
      expiresIn: minted.expiresIn,
      address: wallet,
    };
  });
  return router;
}
