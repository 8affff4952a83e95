import Router from '@koa/router';
import type { Context } from 'koa';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { SigilError } from '@sigil/plugin-api';
import { parseInput } from '../../../core/http/validate.ts';
import type { ProviderVault } from './vault.ts';

/** Slot names as SDKs name their variables: OPENAI_API_KEY, ANTHROPIC_API_KEY, PROVIDER_API_KEY. */
export const SLOT_NAME = /^[A-Z][A-Z0-9_]{1,63}$/;

const signature = z
  .string()
  .regex(/^0x(?:[0-9a-fA-F]{128}|[0-9a-fA-F]{130})$/, 'must be a hex EOA signature (65 or 64 bytes)')
  .transform((value) => value as `0x${string}`);

export const unlockBody = z.object({ signature }).strict();

// Messages never quote the value: a rejected key must not come back in the error.
export const storeBody = z
  .object({
    apiKey: z
      .string()
      .min(1, 'must not be empty')
      .max(8192, 'must be at most 8192 characters')
      .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces or line breaks'),
    signature: signature.optional(),
  })
  .strict();

export const slotParams = z.object({
  slot: z.string().regex(SLOT_NAME, 'must be a key slot name such as OPENAI_API_KEY (A-Z, 0-9, _)'),
});

const principalOf = (ctx: Context): AuthPrincipal => ctx.state.auth as AuthPrincipal;

/**
 * The provider vault's routes, all for the signed-in wallet's session JWT (a vault unlock lives as
 * long as that session): the message to sign, status (configuration state only), unlock and lock,
 * store and delete a key. No route ever returns key material.
 */
export function providerVaultRouter(vault: ProviderVault): Router {
  const router = new Router({ prefix: '/wallet/provider-vault' });
  router.get('/message', (ctx) => {
    ctx.body = { message: vault.message, version: 1, signWith: 'personal_sign (EIP-191)' };
  });
  const session = requireAuth({ methods: ['jwt'] });
  router.get('/', session, async (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    ctx.body = await vault.status(principalOf(ctx));
  });
  router.post('/unlock', session, async (ctx) => {
    const body = parseInput(unlockBody, ctx.request.body ?? {}, 'body');
    ctx.body = await vault.unlock(principalOf(ctx), body.signature);
  });
  router.post('/lock', session, async (ctx) => {
    await vault.lock(principalOf(ctx));
    ctx.status = 204;
  });
  router.put('/keys/:slot', session, async (ctx) => {
    const { slot } = parseInput(slotParams, ctx.params, 'params');
    const body = parseInput(storeBody, ctx.request.body ?? {}, 'body');
    const created = await vault.store(principalOf(ctx), slot, body.apiKey, body.signature);
    ctx.status = created ? 201 : 200;
    ctx.body = { slot, configured: true, unlocked: true, protection: 'wallet' };
  });
  router.delete('/keys/:slot', session, async (ctx) => {
    const { slot } = parseInput(slotParams, ctx.params, 'params');
    if (!(await vault.remove(principalOf(ctx), slot))) {
      throw new SigilError('not_found', `No provider key is stored for ${slot}`);
    }
    ctx.status = 204;
  });
  return router;
}
