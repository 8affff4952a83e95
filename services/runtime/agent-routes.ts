import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../core/auth/index.ts';
import { parseInput } from '../../core/http/validate.ts';
import type { Agents } from './agents.ts';
import { modelNotOffered } from './models.ts';

export const agentParams = z.object({ id: z.uuid('must be an agent id (a UUID)') });

export const createBody = z
  .object({
    name: z.string().trim().min(1).max(100),
    model: z.string().trim().min(1).max(200),
  })
  .strict();

export const callerOf = (state: { auth?: AuthPrincipal }): string => (state.auth as AuthPrincipal).address;

/**
 * `POST /agents`, `GET /agents`, `GET /agents/:id`: the signed-in wallet's agents only. An agent's model
 * must be one a loaded provider offers (`offered`), so an agent that could never chat is not created.
 */
export function agentsRouter(agents: Agents, offered: () => Promise<string[]>): Router {
  const router = new Router({ prefix: '/agents' });
  router.use(requireAuth());
  router.post('/', async (ctx) => {
    const body = parseInput(createBody, ctx.request.body ?? {}, 'body');
    const models = await offered();
    if (!models.includes(body.model)) throw modelNotOffered(body.model, models);
    ctx.status = 201;
    ctx.body = await agents.create(callerOf(ctx.state), body);
  });
  router.get('/', async (ctx) => {
    ctx.body = { agents: await agents.list(callerOf(ctx.state)) };
  });
  router.get('/:id', async (ctx) => {
    const { id } = parseInput(agentParams, ctx.params, 'params');
    ctx.body = await agents.get(callerOf(ctx.state), id);
  });
  return router;
}
