import { createPublicClient, getAddress, http, parseAbi, type Address } from 'viem';
import type { Database } from '../../core/db/database.ts';
import { auditLedger, type AuditMismatch } from '../../services/runtime/ledger/audit.ts';
import { balances } from '../services/gateway/payments/support.ts';
import type { DevChain } from '../support/chain.ts';
import { eventually } from '../support/eventually.ts';

/**
 * What the scale-out proof reads after its load to tell whether money stayed exact: the gateways'
 * x402 settlement records against the chain, and the runtime's ledger against itself and the chain.
 * Each reader lists the problems it found (empty: the books balance) beside the figures it compared.
 */

const authorizationUsed = parseAbi([
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
]);

/**
 * The books once they are quiet: read until `read` finds no problem (what a killed replica left under
 * way is finished by the others), else as they are after `timeoutMs`.
 */
export function whenQuiet<T extends { problems: string[] }>(
  what: string,
  read: () => Promise<T>,
  timeoutMs = 60_000,
): Promise<T> {
  return eventually(
    what,
    async () => {
      const found = await read();
      return found.problems.length === 0 && found;
    },
    timeoutMs,
  ).catch(read);
}

/** A row of payment_settlements, as read here. */
export interface SettlementRow {
  id: string;
  state: string;
  payer: string;
  amount: string;
}

/** The EIP-3009 nonce of a gateway payment id (`<network>:<token>:<payer>:<nonce>`). */
export const nonceOfId = (id: string): string => id.split(':').at(-1) as string;

/** A paid operation as its client recorded it: the nonces it signed, and whether it was answered. */
export interface PaidCall {
  label: string;
  nonces: string[];
  answered: boolean;
}

export interface X402Books {
  problems: string[];
  rows: SettlementRow[];
  settled: number;
  events: number;
  treasuryGain: bigint;
}

/**
 * No double charge and no lost settlement, across every replica's records: each settled record has
 * exactly one AuthorizationUsed of its payer and nonce on chain, and each such event a settled record;
 * each payer lost what its settled records say and the treasury (payTo) gained their sum; every paid
 * answer has its settled record, and no refused one was charged; nothing is left settling or
 * executing (a call whose replica died is released by another replica once it is dead).
 */
export async function x402Books(options: {
  chain: DevChain;
  db: Database;
  treasury: { address: Address; before: bigint };
  /** Every account that paid a gateway, with its balance before the load. */
  payers: { address: Address; before: bigint }[];
  calls: PaidCall[];
  /** Completed ledger sweeps also pay the treasury. */
  sweptToTreasury: bigint;
}): Promise<X402Books> {
  const { chain, db } = options;
  const problems: string[] = [];
  const rows = (await db('payment_settlements').select('id', 'state', 'payer', 'amount')) as SettlementRow[];
  const byNonce = new Map(rows.map((row) => [nonceOfId(row.id), row]));
  const settled = rows.filter((row) => row.state === 'settled');
  const reader = createPublicClient({ transport: http(chain.rpcUrl) });
  const eventsByNonce = new Map<string, number>();
  const balanceOf = balances(chain);
  for (const payer of options.payers) {
    const events = await reader.getLogs({
      address: chain.token.address,
      event: authorizationUsed[0],
      args: { authorizer: payer.address },
      fromBlock: 0n,
    });
    for (const event of events) {
      const nonce = String(event.args.nonce).toLowerCase();
      eventsByNonce.set(nonce, (eventsByNonce.get(nonce) ?? 0) + 1);
    }
    const paid = settled
      .filter((row) => getAddress(row.payer) === getAddress(payer.address))
      .reduce((sum, row) => sum + BigInt(row.amount), 0n);
    const lost = payer.before - (await balanceOf(payer.address));
    if (lost !== paid) problems.push(`${payer.address} lost ${lost}, its settled records say ${paid}`);
  }
  const list = (what: string, items: string[]) => {
    if (items.length > 0) problems.push(`${what}: ${items.join(', ')}`);
  };
  list(
    'settled records without exactly one AuthorizationUsed',
    settled.filter((row) => eventsByNonce.get(nonceOfId(row.id)) !== 1).map((row) => row.id),
  );
  list(
    'AuthorizationUsed events without a settled record',
    [...eventsByNonce.keys()].filter((nonce) => byNonce.get(nonce)?.state !== 'settled'),
  );
  const settledSum = settled.reduce((sum, row) => sum + BigInt(row.amount), 0n);
  const treasuryGain = (await balanceOf(options.treasury.address)) - options.treasury.before;
  if (treasuryGain !== settledSum + options.sweptToTreasury)
    problems.push(
      `the treasury gained ${treasuryGain}, the settled records say ${settledSum} (and sweeps ${options.sweptToTreasury})`,
    );
  list(
    'paid answers without a settled record',
    options.calls
      .filter((call) => call.answered && call.nonces.length > 0)
      .filter((call) => !call.nonces.some((nonce) => byNonce.get(nonce)?.state === 'settled'))
      .map((call) => call.label),
  );
  list(
    'refused calls that were charged',
    options.calls
      .filter((call) => !call.answered)
      .filter((call) => call.nonces.some((nonce) => eventsByNonce.has(nonce)))
      .map((call) => call.label),
  );
  list(
    'records left settling or executing',
    rows
      .filter((row) => row.state === 'settling' || row.state === 'executing')
      .map((row) => `${row.id} ${row.state}`),
  );
  return { problems, rows, settled: settled.length, events: eventsByNonce.size, treasuryGain };
}

/** A ledger wallet of the load, and its deposit address. */
export interface LedgerWallet {
  name: string;
  address: Address;
  deposit: Address;
}

export interface LedgerBooks {
  problems: string[];
  mismatches: AuditMismatch[];
}

/**
 * Each day an agent spent more than its daily budget (now) allows, with its open holds: none while the
 * budgets hold. Read before a budget is raised.
 */
export async function daysOverBudget(db: Database): Promise<object[]> {
  const held = db('ledger_holds as hold')
    .whereRaw('?? = ??', ['hold.agent_id', 'spend.agent_id'])
    .select(db.raw('coalesce(sum(??), 0)', ['hold.amount']));
  return (await db('agent_daily_spend as spend')
    .join('agent_budgets as budget', 'budget.agent_id', 'spend.agent_id')
    .whereNotNull('budget.daily_limit')
    .whereRaw('?? + (?) > ??', ['spend.amount', held, 'budget.daily_limit'])
    .select('spend.agent_id', 'spend.day', 'spend.amount', 'budget.daily_limit')) as object[];
}

/**
 * The ledger invariant (auditLedger: every running total against the entries, nothing negative, the
 * per-day spend against the charges), every accepted withdrawal completed,
 * each wallet's completed withdrawals what it received on chain, and each deposit address's balance
 * what the ledger read.
 */
export async function ledgerBooks(options: {
  chain: DevChain;
  db: Database;
  wallets: LedgerWallet[];
}): Promise<LedgerBooks> {
  const { chain, db } = options;
  const problems: string[] = [];
  const audit = await auditLedger(db);
  if (!audit.ok) problems.push(`the ledger audit found ${audit.mismatches.length} mismatch(es)`);
  const open = (await db('ledger_transfers')
    .whereNotIn('state', ['completed', 'failed'])
    .select('id', 'kind', 'state', 'reason')) as object[];
  if (open.length > 0) problems.push(`transfers still open: ${JSON.stringify(open)}`);
  // A withdrawal the ledger accepted fails only when the chain refuses it for good (its signed
  // transfer expired, or reverts): none of those here, so each must have reached its wallet.
  const failed = (await db('ledger_transfers')
    .where({ kind: 'withdrawal', state: 'failed' })
    .select('id', 'wallet', 'amount', 'reason')) as object[];
  if (failed.length > 0) problems.push(`accepted withdrawals that failed: ${JSON.stringify(failed)}`);
  const balanceOf = balances(chain);
  for (const wallet of options.wallets) {
    const completed = (await db('ledger_transfers')
      .where({ wallet: wallet.address, kind: 'withdrawal', state: 'completed' })
      .select('amount')) as { amount: string }[];
    const withdrawn = completed.reduce((sum, row) => sum + BigInt(row.amount), 0n);
    const received = await balanceOf(wallet.address);
    if (received !== withdrawn)
      problems.push(
        `${wallet.name} received ${received} on chain, its completed withdrawals say ${withdrawn}`,
      );
    const row = (await db('ledger_wallets').where({ wallet: wallet.address }).first()) as
      { on_chain_balance: string | number } | undefined;
    const held = await balanceOf(wallet.deposit);
    if (row === undefined || BigInt(row.on_chain_balance) !== held)
      problems.push(
        `${wallet.name}'s deposit address holds ${held}, the ledger read ${row?.on_chain_balance ?? 'nothing'}`,
      );
  }
  return { problems, mismatches: audit.mismatches };
}
