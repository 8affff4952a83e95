import Router from '@koa/router';
import type { Context } from 'koa';
import { PROTECTED_RESOURCE_PATH, requestBaseUrl } from './challenge.ts';
import type { AuthSettings } from './settings.ts';
import { WALLET_TOKEN_PREFIX } from './wallet-tokens.ts';

/**
 * The gateway's OAuth 2.0 protected-resource metadata (RFC 9728), as the MCP authorization spec has an
 * MCP server publish it. The gateway runs no OAuth authorization server: its bearer tokens are wallet
 * tokens a wallet makes itself by signing in, which the document says how to do, so that a client
 * refused with a 401 can tell its user what to get instead of failing in an OAuth flow.
 */
export function protectedResourceRouter(
  settings: AuthSettings,
  /** The runtime whose delegated JWTs the gateway accepts, when its URL is configured. */
  authorizationServer: string | undefined,
): Router {
  const router = new Router();
  const document = (ctx: Context, resourcePath: string) => {
    const base = requestBaseUrl(settings, ctx.req.headers);
    const auth = `${base}${settings.routePrefix}`;
    ctx.set('Cache-Control', 'public, max-age=3600');
    ctx.body = {
      resource: `${base}${resourcePath}`,
      resource_name: 'Sigil tool gateway',
      ...(authorizationServer === undefined ? {} : { authorization_servers: [authorizationServer] }),
      bearer_methods_supported: ['header'],
      wallet_tokens: {
        description:
          `Wallet tokens (${WALLET_TOKEN_PREFIX}…) are made by a wallet, not by an OAuth flow: GET ` +
          `${auth}/challenge?address=<wallet>, sign its message (SIWE), POST it with the signature to ` +
          `${auth}/verify for a session JWT, then POST ${auth}/create-token with that JWT as bearer. ` +
          'Send the token as Authorization: Bearer <token>. A revoked or unknown token is refused with 401.',
        challenge_endpoint: `${auth}/challenge`,
        verify_endpoint: `${auth}/verify`,
        token_endpoint: `${auth}/create-token`,
        token_prefix: WALLET_TOKEN_PREFIX,
      },
    };
  };
  router.get(PROTECTED_RESOURCE_PATH, (ctx) => document(ctx, ''));
  // Where MCP clients look first for the resource at /mcp when no header named the document.
  router.get(`${PROTECTED_RESOURCE_PATH}/mcp`, (ctx) => document(ctx, '/mcp'));
  return router;
}
