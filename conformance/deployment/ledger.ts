import {
  createPublicClient,
  createWalletClient,
  defineChain,
  http,
  parseAbi,
  type Address,
  type Hex,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { z } from 'zod';
import { ensure, failWith, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { someAgent } from './agents.ts';
import { expectJson } from './expect.ts';
import { bearer, RUNTIME_AUTH, signIn } from './wallet.ts';

/**
 * The wallet ledger of the runtime spec (part 2: the balance rule; part 7: a request failing the budget
 * check is refused; part 8: per-agent day, week and month budgets, and a minimum balance to chat). The
 * spec leaves the ledger's routes unshown; these checks use Sigil's (README, "Wallet ledger"), so a
 * runtime without them is reported not applicable through the `runtime-ledger` feature.
 */

/** An amount in base units: a decimal integer string, or a JSON integer. */
const units = z
  .union([z.string().regex(/^-?[0-9]+$/, 'an integer amount in base units'), z.number().int()])
  .transform((value) => BigInt(value));

const balanceSchema = z.object({
  onChainBalance: units,
  unsettledSpend: units,
  pendingWithdrawals: units,
  available: units,
  minimumBalance: units.optional(),
  /** Spend reserved for work in progress (a chat's hold); a deployment without holds omits it. */
  heldSpend: units.optional(),
});
type LedgerBalance = z.infer<typeof balanceSchema>;

const refusalSchema = z.object({
  code: z.string(),
  message: z.string(),
  details: z.object({
    limit: z.string(),
    remaining: units,
    limitAmount: units.optional(),
    resetsAt: z.string().optional(),
  }),
});

/**
 * How long a deposit may take to count (the deployment's confirmations) or a withdrawal to complete;
 * the three waits of a check stay inside the runner's 60 s per check.
 */
const CHAIN_WAIT_MS = 18_000;

const erc20 = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
]);

interface Session {
  token: string;
  address: Address;
}

async function session(context: DeploymentContext): Promise<Session> {
  const signedIn = await signIn(context, RUNTIME_AUTH);
  return { token: signedIn.token, address: signedIn.wallet.address };
}

async function readBalance(context: DeploymentContext, who: Session): Promise<LedgerBalance> {
  const response = await context.http.request({
    service: 'runtime',
    path: '/wallet/balance',
    headers: bearer(who.token),
  });
  const balance = expectJson(response, 200, balanceSchema, 'GET /wallet/balance');
  const held = balance.heldSpend ?? 0n;
  const rule = balance.onChainBalance - balance.unsettledSpend - balance.pendingWithdrawals - held;
  ensure(
    balance.available === rule,
    `GET /wallet/balance: available is ${balance.available}, but onChainBalance − unsettledSpend − pendingWithdrawals − heldSpend is ${balance.onChainBalance} − ${balance.unsettledSpend} − ${balance.pendingWithdrawals} − ${held} = ${rule}`,
  );
  return balance;
}

function setBudgets(
  context: DeploymentContext,
  who: Session,
  agentId: string,
  limits: Record<string, string | null>,
) {
  return context.http.request({
    service: 'runtime',
    method: 'PUT',
    path: `/agents/${agentId}/budgets`,
    headers: bearer(who.token),
    json: limits,
  });
}

function budgetCheck(context: DeploymentContext, who: Session, agentId: string, amount?: bigint) {
  return context.http.request({
    service: 'runtime',
    method: 'POST',
    path: `/agents/${agentId}/budget-check`,
    headers: bearer(who.token),
    json: amount === undefined ? {} : { amount: amount.toString() },
  });
}

/** A refusal as the spec asks (refused: a 4xx), saying which limit and what is left. */
function expectRefusal(response: HttpResponse, what: string): z.infer<typeof refusalSchema> {
  ensure(
    response.status >= 400 && response.status < 500,
    `${what}: expected a refusal (HTTP 4xx), got ${response.status}`,
  );
  return expectJson(response, response.status, refusalSchema, what);
}

function expectResetWithin(resetsAt: string | undefined, maxMs: number, what: string): void {
  ensure(
    resetsAt !== undefined,
    `${what}: the refusal does not say when the limit resets (details.resetsAt)`,
  );
  const at = Date.parse(resetsAt);
  ensure(!Number.isNaN(at), `${what}: details.resetsAt is not a date: ${resetsAt}`);
  const now = Date.now();
  ensure(
    at > now - 60_000 && at <= now + maxMs + 60_000,
    `${what}: details.resetsAt ${resetsAt} is not within the window`,
  );
}

async function eventually<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + CHAIN_WAIT_MS;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) failWith(`${what} within ${CHAIN_WAIT_MS / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

const DAY_MS = 86_400_000;

export const ledgerRequirements: readonly Requirement[] = [
  {
    id: 'RT-2.ledger-balance-rule',
    level: 'MUST',
    title:
      'A wallet’s ledger shows onChainBalance, unsettledSpend, pendingWithdrawals and available, in integer base units, with available = onChainBalance − unsettledSpend − pendingWithdrawals (less any heldSpend reserved for work in progress)',
    spec: 'runtime spec part 2: Ledger (onChainBalance, unsettledSpend, pendingWithdrawals, available); balance rule',
    service: 'runtime',
    features: ['runtime-wallet-auth', 'runtime-ledger'],
    check: async (context) => {
      const who = await session(context);
      const balance = await readBalance(context, who);
      ensure(balance.available >= 0n, `a new wallet's available balance is ${balance.available}, below zero`);
      const other = await session(context);
      await readBalance(context, other);
      return pass();
    },
  },
  {
    id: 'RT-2.ledger-deposit-and-withdrawal',
    level: 'MUST',
    title:
      'A deposit to the wallet’s deposit address counts in onChainBalance once confirmed; a withdrawal leaves available at once; the balance rule holds throughout and the ledger agrees with the chain',
    spec: 'runtime spec part 1 (one deposit address, an on-chain balance cache, pending withdrawals) and part 2 (balance rule)',
    service: 'runtime',
    features: ['runtime-wallet-auth', 'runtime-ledger'],
    check: async (context) => {
      const { payerKey, rpcUrl } = context.target;
      if (payerKey === undefined || rpcUrl === undefined) {
        notApplicableBecause('needs a funded payer (--payer-key) and the chain (--rpc-url) to deposit with');
      }
      const who = await session(context);
      const depositResponse = await context.http.request({
        service: 'runtime',
        path: '/wallet/deposit-address',
        headers: bearer(who.token),
      });
      const deposit = expectJson(
        depositResponse,
        200,
        z.object({
          address: z.string().regex(/^0x[0-9a-fA-F]{40}$/),
          token: z.object({ address: z.string().regex(/^0x[0-9a-fA-F]{40}$/) }),
        }),
        'GET /wallet/deposit-address',
      );
      const before = await readBalance(context, who);
      const minimum = before.minimumBalance && before.minimumBalance > 0n ? before.minimumBalance : 10_000n;
      // The withdrawal: the minimum balance, or the smallest withdrawal the deployment takes if larger.
      const limits = await context.http.request({
        service: 'runtime',
        path: '/wallet/withdrawals?limit=1',
        headers: bearer(who.token),
      });
      const smallest = z.object({ limits: z.object({ minAmount: units }) }).safeParse(limits.body).data
        ?.limits.minAmount;
      const withdrawn = smallest !== undefined && smallest > minimum ? smallest : minimum;
      const amount = minimum + withdrawn;
      const token = deposit.token.address as Address;
      const payer = privateKeyToAccount(payerKey as Hex);
      const publicClient = createPublicClient({ transport: http(rpcUrl) });
      const chain = defineChain({
        id: await publicClient.getChainId(),
        name: 'deployment chain',
        nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
        rpcUrls: { default: { http: [rpcUrl] } },
      });
      const held = await publicClient.readContract({
        address: token,
        abi: erc20,
        functionName: 'balanceOf',
        args: [payer.address],
      });
      if (held < amount)
        notApplicableBecause(`the payer holds ${held} base units of the token; ${amount} are needed`);
      const wallet = createWalletClient({ chain, transport: http(rpcUrl), account: payer });
      const hash = await wallet.writeContract({
        address: token,
        abi: erc20,
        functionName: 'transfer',
        args: [deposit.address as Address, amount],
      });
      const receipt = await publicClient.waitForTransactionReceipt({ hash });
      ensure(receipt.status === 'success', `the deposit transaction ${hash} reverted`);
      context.evidence.note(`deposited ${amount} base units to ${deposit.address}`, { transaction: hash });
      const funded = await eventually('the deposit was not counted in onChainBalance', async () => {
        const balance = await readBalance(context, who);
        return balance.onChainBalance >= before.onChainBalance + amount ? balance : undefined;
      });
      ensure(
        funded.available >= amount,
        `after the deposit, available is ${funded.available}, less than ${amount}`,
      );
      const agentId = await someAgent(context, who.token);
      const allowed = await budgetCheck(context, who, agentId);
      ensure(
        allowed.status === 200,
        `with ${funded.available} available (minimum ${minimum}), the budget check answered ${allowed.status}`,
      );

      const withdrawal = await context.http.request({
        service: 'runtime',
        method: 'POST',
        path: '/wallet/withdrawals',
        headers: bearer(who.token),
        json: {
          amount: withdrawn.toString(),
          to: payer.address,
          idempotencyKey: `conformance-${Date.now()}`,
        },
      });
      ensure(
        withdrawal.status === 200 || withdrawal.status === 202,
        `POST /wallet/withdrawals answered ${withdrawal.status}`,
      );
      const { id } = expectJson(
        withdrawal,
        withdrawal.status,
        z.object({ id: z.string() }),
        'POST /wallet/withdrawals',
      );
      const right = await readBalance(context, who);
      ensure(
        right.available <= funded.available - withdrawn,
        `right after a withdrawal of ${withdrawn}, available is ${right.available} (was ${funded.available}): the withdrawal is not counted`,
      );
      await eventually('the withdrawal did not complete', async () => {
        const read = await context.http.request({
          service: 'runtime',
          path: `/wallet/withdrawals/${id}`,
          headers: bearer(who.token),
        });
        const view = expectJson(read, 200, z.object({ status: z.string() }), 'GET /wallet/withdrawals/:id');
        if (view.status === 'failed') failWith(`the withdrawal failed: ${read.text.slice(0, 300)}`);
        return view.status === 'completed' ? view : undefined;
      });
      const onChain = await publicClient.readContract({
        address: token,
        abi: erc20,
        functionName: 'balanceOf',
        args: [deposit.address as Address],
      });
      await eventually(`the ledger's onChainBalance did not reach the chain's ${onChain}`, async () => {
        const balance = await readBalance(context, who);
        return balance.onChainBalance === onChain && balance.pendingWithdrawals === 0n ? balance : undefined;
      });
      return pass();
    },
  },
  {
    id: 'RT-7.ledger-budget-refusal',
    level: 'MUST',
    title:
      'A spend over an agent’s daily or monthly budget is refused, naming the limit, the amount left and when it resets',
    spec: 'runtime spec part 7 (a request failing the budget check is refused) and part 8 (per-agent budgets for day, week and month)',
    service: 'runtime',
    features: ['runtime-wallet-auth', 'runtime-ledger'],
    check: async (context) => {
      const who = await session(context);
      const agentId = await someAgent(context, who.token);
      let response = await setBudgets(context, who, agentId, { daily: '1000' });
      ensure(response.status === 200, `PUT /agents/:id/budgets answered ${response.status}`);
      response = await budgetCheck(context, who, agentId, 1001n);
      let refusal = expectRefusal(response, 'a budget check of 1001 against a daily budget of 1000');
      ensure(
        refusal.details.limit === 'daily',
        `the refusal names the limit "${refusal.details.limit}", not "daily"`,
      );
      ensure(
        refusal.details.remaining === 1000n,
        `the refusal says ${refusal.details.remaining} is left, not 1000`,
      );
      expectResetWithin(refusal.details.resetsAt, DAY_MS, 'the daily refusal');
      // Within the budget, the budget is not what refuses (a new wallet may still lack the minimum balance).
      response = await budgetCheck(context, who, agentId, 1000n);
      if (response.status !== 200) {
        const other = expectRefusal(response, 'a budget check of 1000 against a daily budget of 1000');
        ensure(
          !['daily', 'weekly', 'monthly'].includes(other.details.limit),
          `a spend of exactly the daily budget was refused by the ${other.details.limit} budget`,
        );
      }
      response = await setBudgets(context, who, agentId, { daily: null, monthly: '500' });
      ensure(response.status === 200, `PUT /agents/:id/budgets answered ${response.status}`);
      refusal = expectRefusal(
        await budgetCheck(context, who, agentId, 501n),
        'a budget check of 501 against a monthly budget of 500',
      );
      ensure(
        refusal.details.limit === 'monthly',
        `the refusal names the limit "${refusal.details.limit}", not "monthly"`,
      );
      ensure(
        refusal.details.remaining === 500n,
        `the refusal says ${refusal.details.remaining} is left, not 500`,
      );
      expectResetWithin(refusal.details.resetsAt, 31 * DAY_MS, 'the monthly refusal');
      return pass();
    },
  },
  {
    id: 'RT-8.ledger-minimum-balance',
    level: 'MUST',
    title:
      'A wallet with nothing deposited is refused the budget check a chat makes, for the minimum balance',
    spec: 'runtime spec part 8 (a minimum balance is required to chat) and part 3 (budget check: minimum balance and per-agent limits)',
    service: 'runtime',
    features: ['runtime-wallet-auth', 'runtime-ledger'],
    check: async (context) => {
      const who = await session(context);
      const balance = await readBalance(context, who);
      if (balance.available > 0n)
        notApplicableBecause(`a new wallet already has ${balance.available} available`);
      const agentId = await someAgent(context, who.token);
      const refusal = expectRefusal(
        await budgetCheck(context, who, agentId),
        'a budget check by a wallet with nothing deposited',
      );
      ensure(
        refusal.details.limit === 'minimum_balance',
        `the refusal names the limit "${refusal.details.limit}", not "minimum_balance"`,
      );
      ensure(
        refusal.details.remaining === balance.available,
        `the refusal says ${refusal.details.remaining} is available, the balance ${balance.available}`,
      );
      ensure(
        refusal.details.limitAmount !== undefined && refusal.details.limitAmount > 0n,
        'the refusal does not say which minimum balance is required (details.limitAmount > 0)',
      );
      return pass();
    },
  },
];
