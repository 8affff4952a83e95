import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth } from '../../../core/auth/index.ts';
import { parseInput } from '../../../core/http/validate.ts';
import { agentParams, callerOf } from '../agent-routes.ts';
import { amountSchema, TOKEN_DECIMALS } from './amounts.ts';
import { ENTRY_KINDS, type EntryKind, type Ledger } from './ledger.ts';
import type { DepositAddresses } from './deposits.ts';
import { balanceView, budgetsView, entryView } from './views.ts';

const budgetsBody = z
  .object({
    daily: amountSchema({ allowZero: true }).nullable().optional(),
    weekly: amountSchema({ allowZero: true }).nullable().optional(),
    monthly: amountSchema({ allowZero: true }).nullable().optional(),
  })
  .strict()
  .refine(
    (body) => body.daily !== undefined || body.weekly !== undefined || body.monthly !== undefined,
    'give at least one of daily, weekly, monthly',
  );

const checkBody = z.object({ amount: amountSchema({ allowZero: true }).optional() }).strict();

const historyQuery = z
  .object({
    limit: z
      .string()
      .regex(/^[0-9]{1,3}$/, 'must be an integer from 1 to 200')
      .transform(Number)
      .refine((value) => value >= 1 && value <= 200, 'must be an integer from 1 to 200')
      .optional(),
    cursor: z.string().min(1).max(200).optional(),
    kind: z
      .string()
      .transform((value) => value.split(','))
      .pipe(z.array(z.enum(ENTRY_KINDS as [EntryKind, ...EntryKind[]])).max(ENTRY_KINDS.length))
      .optional(),
  })
  .strict();

export interface LedgerRouteDeps {
  ledger: Ledger;
  deposits: DepositAddresses;
  confirmations: number;
  /** Whether balances are read from a chain at all. */
  watching: boolean;
  /** What the balance says about the token and the chain it is read from. */
  token: () => Record<string, unknown>;
}

/**
 * The wallet ledger over HTTP, for the signed-in wallet only (another wallet's agent is a 404):
 * balance, transaction history, per-agent budgets and the budget check a chat makes.
 */
export function ledgerRouter(deps: LedgerRouteDeps): Router {
  const { ledger } = deps;
  const router = new Router();
  const auth = requireAuth();

  router.get('/wallet/balance', auth, async (ctx) => {
    const balance = await ledger.balance(callerOf(ctx.state));
    ctx.body = balanceView(balance, {
      minimumBalance: ledger.settings.minimumBalance.toString(),
      confirmations: deps.confirmations,
      token: { decimals: TOKEN_DECIMALS, ...deps.token() },
    });
  });

  // Only its owner sees it: it is derived for the signed-in wallet and never listed elsewhere.
  router.get('/wallet/deposit-address', auth, async (ctx) => {
    const deposit = await deps.deposits.of(callerOf(ctx.state));
    ctx.body = {
      wallet: deposit.wallet,
      address: deposit.address,
      token: { decimals: TOKEN_DECIMALS, ...deps.token() },
      confirmations: deps.confirmations,
      watching: deps.watching,
    };
  });

  router.get('/wallet/transactions', auth, async (ctx) => {
    const query = parseInput(historyQuery, ctx.query, 'query');
    const page = await ledger.history(callerOf(ctx.state), {
      limit: query.limit ?? 50,
      ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
      ...(query.kind === undefined ? {} : { kinds: query.kind }),
    });
    ctx.body = { transactions: page.entries.map(entryView), nextCursor: page.nextCursor ?? null };
  });

  router.get('/agents/:id/budgets', auth, async (ctx) => {
    const { id } = parseInput(agentParams, ctx.params, 'params');
    ctx.body = budgetsView(id, await ledger.budgets(callerOf(ctx.state), id));
  });

  router.put('/agents/:id/budgets', auth, async (ctx) => {
    const { id } = parseInput(agentParams, ctx.params, 'params');
    const body = parseInput(budgetsBody, ctx.request.body ?? {}, 'body');
    const wallet = callerOf(ctx.state);
    const current = await ledger.budgets(wallet, id);
    const pick = (window: 'daily' | 'weekly' | 'monthly') =>
      body[window] === undefined ? current[window].limit : body[window];
    ctx.body = budgetsView(
      id,
      await ledger.setBudgets(wallet, id, {
        daily: pick('daily'),
        weekly: pick('weekly'),
        monthly: pick('monthly'),
      }),
    );
  });

  router.post('/agents/:id/budget-check', auth, async (ctx) => {
    const { id } = parseInput(agentParams, ctx.params, 'params');
    const body = parseInput(checkBody, ctx.request.body ?? {}, 'body');
    const { balance, budgets } = await ledger.check(callerOf(ctx.state), id, body.amount ?? 0n);
    ctx.body = {
      allowed: true,
      amount: (body.amount ?? 0n).toString(),
      available: balance.available.toString(),
      minimumBalance: ledger.settings.minimumBalance.toString(),
      budgets: budgetsView(id, budgets),
    };
  });
  return router;
}
