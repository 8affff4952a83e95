import { checksumAddress } from '../../../core/chain/address.ts';
import { isConstraintViolation } from '../../../core/db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import { MAX_AMOUNT } from './amounts.ts';
import type { Balance } from './balance.ts';
import { readBudgets, refuseOverBudget, type Budgets } from './budgets.ts';
import { CHARGE_KEY_PREFIX, entryByKey, IDEMPOTENCY_KEY, type LedgerEntry } from './entries.ts';
import { SpendRefused } from './errors.ts';
import type { Ledger } from './ledger.ts';

export interface Charge {
  entry: LedgerEntry;
  /** True when the idempotency key had already charged: this is the first charge, not a new one. */
  replayed: boolean;
}

/** A charge as the ledger takes it: checked, the wallet checksummed, the caller's key without prefix. */
export interface ChargeInput {
  wallet: string;
  agentId: string;
  amount: bigint;
  idempotencyKey: string;
}

/** Checks a charge's amount and key (400 otherwise) and checksums its wallet. */
export function chargeInput(input: ChargeInput): ChargeInput {
  if (input.amount <= 0n || input.amount > MAX_AMOUNT) {
    throw new SigilError('invalid_request', `A charge must be between 1 and ${MAX_AMOUNT} base units`);
  }
  if (!IDEMPOTENCY_KEY.test(input.idempotencyKey)) {
    throw new SigilError(
      'invalid_request',
      'An idempotency key is 1 to 200 characters of A-Z a-z 0-9 . _ : -',
    );
  }
  return { ...input, wallet: checksumAddress(input.wallet) };
}

/**
 * Charges an agent's spend in a transaction of its own, once per idempotency key: the budget windows
 * and the available balance are checked and the entry appended in one atomic step. A refusal
 * (SpendRefused, 402) records nothing, so the same key may be tried again; a key that charged answers
 * that first charge again (`replayed`), and a key reused for another agent or amount is a 409.
 * Ledger.charge decides the same way for a batch of charges at once (charge-batch.ts), and comes here
 * when a batch's transaction fails.
 */
export async function chargeOnce(ledger: Ledger, input: ChargeInput): Promise<Charge> {
  const { wallet } = input;
  const key = CHARGE_KEY_PREFIX + input.idempotencyKey;
  const attempt = () =>
    ledger.withWallet(wallet, async (trx, balance) => {
      const context = await readBudgets(trx, ledger.clock.now(), wallet, input.agentId, { replayKey: key });
      if (context.replayId !== undefined) {
        const first = (await entryByKey(trx, wallet, key)) as LedgerEntry;
        return { entry: sameCharge(first, input), replayed: true };
      }
      refuseOverBudget(context.budgets, input.amount, { agentId: input.agentId });
      if (input.amount > balance.available) {
        throw new SpendRefused('available', {
          requested: input.amount,
          remaining: balance.available,
          agentId: input.agentId,
        });
      }
      const entry = await ledger.append(
        trx,
        { wallet, kind: 'charge', amount: input.amount, idempotencyKey: key, agentId: input.agentId },
        { knownNew: true },
      );
      return { entry: entry as LedgerEntry, replayed: false };
    });
  try {
    return await attempt();
  } catch (err) {
    // Only reachable if two processes on one SQLite file race the first row of a wallet; then the
    // second attempt finds the first's charge. Any other broken constraint breaks it again.
    if (!isConstraintViolation(err)) throw err;
    return attempt();
  }
}

/**
 * Whether `agentId` may start spending now (what a chat checks before it runs): each budget window
 * has room for `amount` (at least 1 unit), then the available balance is at least the minimum
 * balance and at least `amount`. Throws SpendRefused naming the first limit that fails.
 */
export async function checkSpend(
  ledger: Ledger,
  wallet: string,
  agentId: string,
  amount: bigint,
): Promise<{ balance: Balance; budgets: Budgets }> {
  const address = checksumAddress(wallet);
  const { budgets } = await readBudgets(ledger.db, ledger.clock.now(), address, agentId);
  refuseOverBudget(budgets, amount > 0n ? amount : 1n, { agentId, requested: amount });
  const balance = await ledger.balance(address);
  const minimum = ledger.settings.minimumBalance;
  if (balance.available < minimum) {
    throw new SpendRefused('minimum_balance', {
      requested: amount,
      remaining: balance.available,
      limit: minimum,
      agentId,
    });
  }
  if (amount > balance.available) {
    throw new SpendRefused('available', { requested: amount, remaining: balance.available, agentId });
  }
  return { balance, budgets };
}

/** A replayed key must name the same charge; anything else is a client bug worth a 409. */
export function sameCharge(first: LedgerEntry, input: { agentId: string; amount: bigint }): LedgerEntry {
  if (first.kind !== 'charge' || first.agentId !== input.agentId || first.amount !== input.amount) {
    throw new SigilError('conflict', 'This idempotency key already charged another agent or amount', {
      hint: 'Use a new idempotency key for a new charge',
      details: { entryId: first.id, agentId: first.agentId, amount: first.amount.toString() },
    });
  }
  return first;
}
