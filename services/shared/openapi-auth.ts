import { challengeQuery, createTokenBody, tokenParams, verifyBody } from '../../core/auth/router.ts';
import { bearer, error, json, jsonBody, parametersOf } from './openapi.ts';

/**
 * The sign-in routes of a service under its prefix (`/api/auth` on the gateway, `/auth` on the
 * runtime), and the wallet-token routes where the service accepts wallet tokens (the gateway).
 */
export function authPaths(prefix: string, options: { walletTokens: boolean }): Record<string, unknown> {
  const paths: Record<string, unknown> = {
    [`${prefix}/challenge`]: {
      get: {
        summary: 'A SIWE (EIP-4361) challenge for the address: sign its message with personal_sign',
        parameters: parametersOf(challengeQuery, 'query'),
        responses: {
          '200': json('{ nonce, message, domain, uri, chainId, issuedAt, expiresAt }'),
          '400': error,
        },
      },
    },
    [`${prefix}/verify`]: {
      post: {
        summary: 'Verify a signed SIWE message; answers a session JWT (ES256)',
        requestBody: jsonBody(verifyBody),
        responses: {
          '200': json('{ token, tokenType: "Bearer", expiresAt, expiresIn, address }'),
          '400': error,
          '401': error,
        },
      },
    },
    [`${prefix}/session`]: {
      get: {
        summary:
          'Who the caller is: address, auth method, operator; on the delegated path, the runtime trust state',
        security: bearer,
        responses: {
          '200': json(
            '{ address, method, operator, trust?, trustReason?, trustPlatform?, runtimeJwksSha256? }',
          ),
          '401': error,
        },
      },
    },
  };
  if (!options.walletTokens) return paths;
  return {
    ...paths,
    [`${prefix}/create-token`]: {
      post: {
        summary:
          'Create a long-lived wallet token (prefix sigil_wt_); needs a session JWT or an ERC-8128 signature',
        security: bearer,
        requestBody: jsonBody(createTokenBody, false),
        responses: {
          '201': json('{ token, id, address, label, createdAt, prefix }'),
          '400': error,
          '401': error,
        },
      },
    },
    [`${prefix}/tokens`]: {
      get: {
        summary: "The caller's wallet tokens (never their values)",
        security: bearer,
        responses: {
          '200': json('{ tokens: [{ id, label, createdAt, lastUsedAt, revokedAt }] }'),
          '401': error,
        },
      },
    },
    [`${prefix}/tokens/{id}`]: {
      delete: {
        summary: 'Revoke one of the caller’s wallet tokens',
        security: bearer,
        parameters: parametersOf(tokenParams, 'path'),
        responses: { '204': { description: 'Revoked' }, '401': error, '404': error },
      },
    },
  };
}
