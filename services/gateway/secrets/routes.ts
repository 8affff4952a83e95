import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { SigilError } from '@sigil/plugin-api';
import { parseInput } from '../../../core/http/validate.ts';
import type { Catalog, CatalogEntry } from '../catalog.ts';
import type { SecretVault } from './vault.ts';

export const params = z.object({ serverId: z.string().min(1).max(63) });
export const body = z
  .object({
    secrets: z.record(
      z.string().regex(/^[A-Z][A-Z0-9_]*$/, 'an upper-case environment variable name'),
      z.string().min(1).max(8192),
    ),
  })
  .strict()
  .refine((value) => Object.keys(value.secrets).length > 0, 'give at least one secret');
export const deleteQuery = z
  .object({
    name: z
      .string()
      .regex(/^[A-Z][A-Z0-9_]*$/)
      .optional(),
  })
  .strict();

/**
 * `POST`/`GET`/`DELETE /api/secrets/:serverId`: a wallet's secrets for one server. Only names the
 * catalog declares for that server are accepted (so no one sets NODE_OPTIONS or LD_PRELOAD), values
 * are never returned, and a change stops the wallet's process of that server here at once (`onChange`);
 * other replicas restart theirs before its next call within SECRETS_VERSION_TTL_MS (tool-gateway.ts).
 */
export function secretsRouter(deps: {
  catalog: Catalog;
  vault: SecretVault;
  onChange(wallet: string, serverId: string): Promise<void>;
}): Router {
  const router = new Router({ prefix: '/api/secrets' });
  router.use(requireAuth());
  const caller = (state: { auth?: AuthPrincipal }) => (state.auth as AuthPrincipal).address;
  const view = async (wallet: string, entry: CatalogEntry) => {
    const names = await deps.vault.names(wallet, entry.id);
    return {
      serverId: entry.id,
      names,
      declared: entry.secrets.map((secret) => ({
        name: secret.name,
        required: secret.required,
        description: secret.description,
      })),
      missing: entry.secrets
        .filter((secret) => secret.required && !names.includes(secret.name))
        .map((secret) => secret.name),
      persistence: deps.vault.mode,
    };
  };

  router.post('/:serverId', async (ctx) => {
    const entry = deps.catalog.require(parseInput(params, ctx.params, 'params').serverId);
    const { secrets } = parseInput(body, ctx.request.body ?? {}, 'body');
    const declared = new Set(entry.secrets.map((secret) => secret.name));
    const undeclared = Object.keys(secrets).filter((name) => !declared.has(name));
    if (undeclared.length > 0) {
      throw new SigilError(
        'invalid_request',
        `MCP server "${entry.id}" declares no secret named ${undeclared.join(', ')}`,
        {
          hint: `It declares: ${[...declared].join(', ') || 'none'}`,
        },
      );
    }
    await deps.vault.put(caller(ctx.state), entry.id, secrets);
    await deps.onChange(caller(ctx.state), entry.id);
    ctx.body = await view(caller(ctx.state), entry);
  });
  router.get('/:serverId', async (ctx) => {
    ctx.body = await view(
      caller(ctx.state),
      deps.catalog.require(parseInput(params, ctx.params, 'params').serverId),
    );
  });
  router.delete('/:serverId', async (ctx) => {
    const entry = deps.catalog.require(parseInput(params, ctx.params, 'params').serverId);
    const { name } = parseInput(deleteQuery, ctx.query, 'query');
    if (!(await deps.vault.delete(caller(ctx.state), entry.id, name))) {
      throw new SigilError(
        'not_found',
        name ? `No secret ${name} is stored for "${entry.id}"` : `No secrets are stored for "${entry.id}"`,
      );
    }
    await deps.onChange(caller(ctx.state), entry.id);
    ctx.body = await view(caller(ctx.state), entry);
  });
  return router;
}
