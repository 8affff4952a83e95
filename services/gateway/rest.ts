import Router from '@koa/router';
import { z } from 'zod';
import type { AuthPrincipal } from '../../core/auth/index.ts';
import { SigilError } from '@sigil/plugin-api';
import { disconnection } from '../../core/http/disconnect.ts';
import { parseInput } from '../../core/http/validate.ts';
import { PAYMENT_META_KEY } from './payments/receipts.ts';
import { paymentFromHeaders, receiptOf, setPaymentResponse } from './payments/routes.ts';
import type { ServerDetails, ServerDirectory } from './servers.ts';
import type { ToolCaller } from './tool-calls.ts';
import type { Warmup } from './warmup.ts';

export const serverParams = z.object({ id: z.string().min(1).max(63) });
export const toolParams = serverParams.extend({ name: z.string().min(1).max(128) });
export const callBody = z
  .object({
    arguments: z.record(z.string(), z.unknown()).default({}),
    _meta: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();

const summary = (d: ServerDetails) => ({
  id: d.id,
  title: d.title,
  description: d.description,
  registry: d.registry,
  package: d.package,
  version: d.version ?? d.versionRange,
  filter: d.filter,
  runnable: d.runnable,
  tier: d.tier,
  toolCount: d.tools.length,
});

/** The REST face of the same catalog and execution path as MCP (documented in /api/openapi.json). */
export function restRouter(deps: {
  servers: ServerDirectory;
  caller: ToolCaller;
  warmup: Warmup;
  openApi: () => unknown;
  /** The gateway's configured public URL: paid calls name their resource under it. */
  publicUrl: string;
}): Router {
  const router = new Router();
  router.get('/api/servers', async (ctx) => {
    ctx.body = { servers: (await deps.servers.list()).map(summary) };
  });
  router.get('/api/servers/:id', async (ctx) => {
    ctx.body = await deps.servers.describe(parseInput(serverParams, ctx.params, 'params').id);
  });
  router.get('/api/servers/:id/tools', async (ctx) => {
    const { details } = await deps.servers.admit(parseInput(serverParams, ctx.params, 'params').id);
    ctx.body = { tools: details.tools, quarantinedTools: details.quarantinedTools };
  });
  router.post('/api/servers/:id/tools/:name', async (ctx) => {
    const { id, name } = parseInput(toolParams, ctx.params, 'params');
    const body = parseInput(callBody, ctx.request.body ?? {}, 'body');
    const payment = await paymentFromHeaders(ctx);
    const result = await deps.caller.call(
      {
        serverId: id,
        tool: name,
        arguments: body.arguments,
        wallet: (ctx.state.auth as AuthPrincipal | undefined)?.address,
        meta: payment === undefined ? body._meta : { ...body._meta, [PAYMENT_META_KEY]: payment },
        origin: { clientAddress: ctx.ip },
        resourceUrl: `${deps.publicUrl}/api/servers/${encodeURIComponent(id)}/tools/${encodeURIComponent(name)}`,
      },
      disconnection(ctx.res),
    );
    await setPaymentResponse(ctx, receiptOf(result._meta));
    ctx.body = result;
  });
  router.post('/api/servers/:id/tools/:name/approve', async (ctx) => {
    requireOperator(ctx.state.auth as AuthPrincipal | undefined, 'approve changed tool definitions');
    const { id, name } = parseInput(toolParams, ctx.params, 'params');
    if (!(await deps.servers.approveTool(id, name))) {
      throw new SigilError('not_found', `Tool "${name}" of "${id}" is not in quarantine`);
    }
    ctx.body = await deps.servers.describe(id);
  });
  router.get('/api/warmup/status', async (ctx) => {
    ctx.body = await deps.warmup.status();
  });
  router.post('/api/warmup/refresh', (ctx) => {
    const auth = ctx.state.auth as AuthPrincipal | undefined;
    if (!auth?.operator)
      throw new SigilError('forbidden', 'Only operator wallets may refresh the package cache');
    void deps.warmup.run('demand');
    ctx.status = 202;
    ctx.body = { started: true };
  });
  router.get('/api/openapi.json', (ctx) => {
    ctx.body = deps.openApi();
  });
  return router;
}

function requireOperator(auth: AuthPrincipal | undefined, action: string): void {
  if (!auth) throw new SigilError('unauthorized', `Sign in with an operator wallet to ${action}`);
  if (!auth.operator)
    throw new SigilError('forbidden', `Only operator wallets may ${action}`, {
      hint: 'Operators are listed in gateway.operatorWallets',
    });
}
