import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth } from '../../../core/auth/index.ts';
import { parseInput } from '../../../core/http/validate.ts';
import { agentParams, callerOf } from '../agent-routes.ts';
import { amountSchema, TOKEN_DECIMALS } from './amounts.ts';
import { IDEMPOTENCY_KEY } from './entries.ts';
import { ENTRY_KINDS, type EntryKind, type Ledger } from './ledger.ts';
import type { DepositAddresses } from './deposits.ts';
import type { Transfers } from './transfers.ts';
import { withdrawalView, type Withdrawals } from './withdrawals.ts';
import { SigilError } from '@sigil/plugin-api';
import { balanceView, budgetsView, entryView } from './views.ts';

export const budgetsBody = z
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

export const withdrawalBody = z
  .object({
    amount: amountSchema(),
    /** Where to; the signed-in wallet itself when omitted. Checked for its EIP-55 checksum. */
    to: z.string().max(64).optional(),
    idempotencyKey: z.string().regex(IDEMPOTENCY_KEY, '1 to 200 characters of A-Z a-z 0-9 . _ : -'),
  })
  .strict();

/** `?limit=&cursor=` of a paged list: 1 to 200 items, after the previous page's cursor. */
export const pageFields = {
  limit: z
    .string()
    .regex(/^[0-9]{1,3}$/, 'must be an integer from 1 to 200')
    .transform(Number)
    .refine((value) => value >= 1 && value <= 200, 'must be an integer from 1 to 200')
    .optional(),
  cursor: z.string().min(1).max(200).optional(),
};

export const pageQuery = z.object(pageFields).strict();

export const withdrawalParams = z.object({ id: z.uuid('must be a withdrawal id (a UUID)') });

export const checkBody = z.object({ amount: amountSchema({ allowZero: true }).optional() }).strict();

export const historyQuery = z
  .object({
    ...pageFields,
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
  withdrawals: Withdrawals;
  transfers: Transfers;
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

  router.post('/wallet/withdrawals', auth, async (ctx) => {
    const body = parseInput(withdrawalBody, ctx.request.body ?? {}, 'body');
    const wallet = callerOf(ctx.state);
    const { transfer, replayed } = await deps.withdrawals.request(wallet, {
      amount: body.amount,
      to: body.to ?? wallet,
      idempotencyKey: body.idempotencyKey,
    });
    ctx.status = replayed ? 200 : 202;
    ctx.body = { ...withdrawalView(transfer), replayed };
  });

  router.get('/wallet/withdrawals', auth, async (ctx) => {
    const query = parseInput(pageQuery, ctx.query, 'query');
    const page = await deps.transfers.list(callerOf(ctx.state), 'withdrawal', {
      limit: query.limit ?? 50,
      ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
    });
    const { limits } = deps.withdrawals;
    ctx.body = {
      withdrawals: page.transfers.map(withdrawalView),
      nextCursor: page.nextCursor ?? null,
      limits: {
        minAmount: limits.minAmount.toString(),
        maxAmount: limits.maxAmount.toString(),
        dailyTotal: limits.dailyTotal.toString(),
        maxPerHour: limits.maxPerHour,
      },
    };
  });

  router.get('/wallet/withdrawals/:id', auth, async (ctx) => {
    const { id } = parseInput(withdrawalParams, ctx.params, 'params');
    const transfer = await deps.transfers.get(id, callerOf(ctx.state));
    if (!transfer || transfer.kind !== 'withdrawal') {
      throw new SigilError('not_found', `No withdrawal ${id} for this wallet`, {
        hint: 'List your withdrawals with GET /wallet/withdrawals',
      });
    }
    ctx.body = withdrawalView(transfer);
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
