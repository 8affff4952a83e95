import { expect } from 'chai';
import { SigilError } from '@sigil/plugin-api';
import { dialectOf } from '../../../../core/db/database.ts';
import { chargeInput, chargeOnce, type Charge } from '../../../../services/runtime/ledger/charges.ts';
import { SpendRefused } from '../../../../services/runtime/ledger/errors.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import {
  eventually,
  openLedgerWorld,
  randomWallet,
  seededRandom,
  setOnChain,
  type LedgerWorld,
} from './support.ts';

/** Counts the statements that insert ledger entries: one a transaction that charges. */
function countEntryInserts(world: LedgerWorld): { count: number } {
  const counter = { count: 0 };
  // SQLite quotes names with backticks, PostgreSQL with double quotes (and inserts inside a CTE).
  const insertsEntries = /(^|as \(\s*)insert into ["`]?ledger_entries["`]? /i;
  world.kernel.db.on('query', (query: { sql: string }) => {
    if (insertsEntries.test(query.sql)) counter.count += 1;
  });
  return counter;
}

/** A charge's outcome without database ids, so two ledgers' answers compare. */
function outcomeOf(settled: PromiseSettledResult<Charge>, agentName: (id: string) => string): string {
  if (settled.status === 'fulfilled') {
    const { entry, replayed } = settled.value;
    return `charged ${entry.amount} to ${agentName(entry.agentId ?? '')} under ${entry.idempotencyKey}${replayed ? ', replayed' : ''}`;
  }
  const err = settled.reason as unknown;
  if (err instanceof SpendRefused) return `refused: ${err.limit}, ${err.facts.remaining} left`;
  if (err instanceof SigilError) return `error: ${err.code}`;
  throw err;
}

describeEachDatabase('ledger: group commit of charges', (database) => {
  let batched: LedgerWorld;
  let single: LedgerWorld;
  before(async () => {
    batched = await openLedgerWorld(database);
    single = await openLedgerWorld(database);
  });
  after(async () => {
    await batched?.close();
    await single?.close();
  });

  it('decides a random mix of charges, refusals, replays and conflicts exactly as one transaction a charge does, in arrival order', async function () {
    this.timeout(120_000);
    const random = seededRandom(30);
    // Six wallets of two agents each; the last wallet never funded (no ledger row at all).
    const wallets = Array.from({ length: 6 }, () => randomWallet());
    const names = new Map<string, string>();
    const agents: Record<'batched' | 'single', string[][]> = { batched: [], single: [] };
    for (const [w, wallet] of wallets.entries()) {
      for (const side of ['batched', 'single'] as const) {
        const world = side === 'batched' ? batched : single;
        const own: string[] = [];
        for (let a = 0; a < 2; a++) {
          const agent = await world.service.agents.create(wallet, { name: `a${a}`, model: 'm' });
          names.set(agent.id, `wallet ${w} agent ${a}`);
          own.push(agent.id);
          // Agent 0 has tight budgets, agent 1 none: both refusals and the balance get reached.
          if (a === 0)
            await world.ledger.setBudgets(wallet, agent.id, {
              daily: 40_000n,
              weekly: 60_000n,
              monthly: null,
            });
        }
        agents[side].push(own);
        if (w < 5) await setOnChain(world.ledger, wallet, 100_000n + BigInt(w) * 30_000n);
      }
    }
    const plan = Array.from({ length: 400 }, () => {
      const w = Math.floor(random() * wallets.length);
      const roll = random();
      // Mostly its own agents; sometimes another wallet's agent (404) or one that does not exist.
      const ownerOfAgent = roll < 0.05 ? (w + 1) % wallets.length : w;
      return {
        w,
        ownerOfAgent,
        agent: roll > 0.97 ? -1 : Math.floor(random() * 2),
        amount: BigInt(1 + Math.floor(random() * 8)) * 1000n,
        // Few keys per wallet: replays of the same charge and reuses for another amount both occur.
        key: `k-${Math.floor(random() * 120)}`,
      };
    });
    const inputs = (side: 'batched' | 'single') =>
      plan.map((step) => ({
        wallet: wallets[step.w] as string,
        agentId:
          step.agent < 0
            ? 'agent-that-does-not-exist'
            : (agents[side][step.ownerOfAgent]?.[step.agent] as string),
        amount: step.amount,
        idempotencyKey: step.key,
      }));
    const inserts = countEntryInserts(batched);
    const together = await Promise.allSettled(inputs('batched').map((input) => batched.ledger.charge(input)));
    const oneByOne: PromiseSettledResult<Charge>[] = [];
    for (const input of inputs('single')) {
      oneByOne.push(
        await chargeOnce(single.ledger, chargeInput(input)).then(
          (value) => ({ status: 'fulfilled', value }) as const,
          (reason: unknown) => ({ status: 'rejected', reason }) as const,
        ),
      );
    }
    const name = (id: string) => names.get(id) ?? id;
    const expected = oneByOne.map((o) => outcomeOf(o, name));
    expect(together.map((o) => outcomeOf(o, name))).to.deep.equal(expected);
    // Every kind of outcome was exercised.
    for (const kind of [
      'charged',
      'replayed',
      'refused: daily',
      'refused: available',
      'error: not_found',
      'error: conflict',
    ])
      expect(
        expected.some((line) => line.includes(kind)),
        kind,
      ).to.equal(true);
    // 400 charges of the same moment: one transaction.
    expect(inserts.count).to.equal(1);

    for (const [w, wallet] of wallets.entries()) {
      const [a, b] = [await batched.ledger.balance(wallet), await single.ledger.balance(wallet)];
      // The two ledgers read their on-chain balances at different (test) blocks and times.
      const money = (balance: typeof a) => ({ ...balance, balanceBlock: 0n, balanceUpdatedAt: undefined });
      expect(money(a)).to.deep.equal(money(b));
      for (let agent = 0; agent < 2; agent++) {
        const budgets = await batched.ledger.budgets(wallet, agents.batched[w]?.[agent] as string);
        const reference = await single.ledger.budgets(wallet, agents.single[w]?.[agent] as string);
        expect(budgets).to.deep.equal(reference);
      }
    }
    expect((await batched.ledger.audit()).ok).to.equal(true);
  });

  it('the next batch takes the charges that arrived while one ran together with those its answers caused', async () => {
    const wallet = randomWallet();
    const agent = await batched.service.agents.create(wallet, { name: 'n', model: 'm' });
    await setOnChain(batched.ledger, wallet, 1_000_000n);
    const charge = (idempotencyKey: string) =>
      batched.ledger.charge({ wallet, agentId: agent.id, amount: 1000n, idempotencyKey });
    const inserts = countEntryInserts(batched);
    // Two charges arrive while the first batch's transaction runs (as it locks the wallet) ...
    const arrived: Promise<Charge>[] = [];
    const arriveDuringLock = (query: { sql: string }) => {
      if (
        arrived.length > 0 ||
        !/update|for update/i.test(query.sql) ||
        !query.sql.includes('ledger_wallets')
      )
        return;
      arrived.push(charge('during-1'), charge('during-2'));
    };
    batched.kernel.db.on('query', arriveDuringLock);
    try {
      // ... and the first charge's caller charges again as soon as it is answered.
      const after = await charge('first').then(() => charge('after'));
      const during = await Promise.all(arrived);
      expect([after, ...during].map((c) => c.replayed)).to.deep.equal([false, false, false]);
    } finally {
      batched.kernel.db.off('query', arriveDuringLock);
    }
    expect(arrived).to.have.length(2);
    // The first alone, then the two that waited and the one its answer caused: two transactions.
    expect(inserts.count).to.equal(2);
    expect((await batched.ledger.balance(wallet)).unsettledSpend).to.equal(4000n);
  });

  // Only there does a batch lock its wallets and find its keys' earlier charges in one statement.
  if (database.name === 'postgres')
    it('PostgreSQL: a key another transaction charges while the batch waits for the wallet is answered as that charge, charged once', async () => {
      const { db } = batched.kernel;
      const wallet = randomWallet();
      const agent = await batched.service.agents.create(wallet, { name: 'r', model: 'm' });
      await setOnChain(batched.ledger, wallet, 1_000_000n);
      const charge = { wallet, agentId: agent.id, amount: 1000n, idempotencyKey: 'raced' };
      let batchCharge: Promise<Charge> | undefined;
      let inserts = { count: 0 };
      // Another transaction (another replica's, say) holds the wallet and charges the key; the batch
      // reads the earlier keys in its locking statement, so from before that charge commits.
      const other = await batched.ledger.withWallet(wallet, async (trx) => {
        const entry = await batched.ledger.append(trx, {
          ...charge,
          kind: 'charge',
          idempotencyKey: `charge:${charge.idempotencyKey}`,
        });
        inserts = countEntryInserts(batched);
        batchCharge = batched.ledger.charge(charge);
        await eventually('the batch waiting for the wallet', async () => {
          const waiting = await db('pg_stat_activity')
            .where({ wait_event_type: 'Lock', datname: db.raw('current_database()') })
            .andWhere('query', 'like', '%for update%')
            .first('pid');
          return waiting !== undefined;
        });
        return entry;
      });
      const answered = await (batchCharge as Promise<Charge>);
      expect(answered.replayed).to.equal(true);
      expect(answered.entry.id).to.equal(other?.id);
      // The batch did not see the charge: its write was refused (unique key), then the charge alone replayed.
      expect(inserts.count).to.equal(1);
      expect((await batched.ledger.balance(wallet)).unsettledSpend).to.equal(1000n);
      expect((await batched.ledger.audit(wallet)).ok).to.equal(true);
    });

  it('a charge with bad input is refused (400, a rejected promise) and leaves the charges of the same moment alone', async () => {
    const wallet = randomWallet();
    const agent = await batched.service.agents.create(wallet, { name: 'v', model: 'm' });
    await setOnChain(batched.ledger, wallet, 10_000n);
    const charge = (amount: bigint, idempotencyKey: string) =>
      batched.ledger.charge({ wallet, agentId: agent.id, amount, idempotencyKey });
    const outcomes = await Promise.allSettled([
      charge(1000n, 'ok-1'),
      charge(0n, 'zero'),
      charge(1000n, 'bad key!'),
      charge(1000n, 'ok-2'),
    ]);
    expect(outcomes.map((o) => o.status)).to.deep.equal(['fulfilled', 'rejected', 'rejected', 'fulfilled']);
    for (const o of outcomes.slice(1, 3))
      expect(((o as PromiseRejectedResult).reason as SigilError).code).to.equal('invalid_request');
    expect((await batched.ledger.balance(wallet)).unsettledSpend).to.equal(2000n);
  });

  it('a batch whose transaction fails changes nothing, then charges each alone: only the faulty charge fails', async function () {
    this.timeout(60_000);
    const { db } = batched.kernel;
    // A real fault inside the batch's write: the database itself refuses one entry.
    if (dialectOf(db) === 'postgres') {
      await db.raw(`create function refuse_poison() returns trigger language plpgsql as $$
        begin if new.idempotency_key = 'charge:poison' then raise exception 'poisoned entry'; end if; return new; end $$`);
      await db.raw(
        'create trigger refuse_poison before insert on ledger_entries for each row execute function refuse_poison()',
      );
    } else {
      await db.raw(`create trigger refuse_poison before insert on ledger_entries
        when new.idempotency_key = 'charge:poison' begin select raise(abort, 'poisoned entry'); end`);
    }
    const wallet = randomWallet();
    const agent = await batched.service.agents.create(wallet, { name: 'p', model: 'm' });
    await setOnChain(batched.ledger, wallet, 1_000_000n);
    const inserts = countEntryInserts(batched);
    const keys = ['a', 'b', 'c', 'poison', 'd', 'e', 'f'];
    const outcomes = await Promise.allSettled(
      keys.map((key) =>
        batched.ledger.charge({ wallet, agentId: agent.id, amount: 1000n, idempotencyKey: key }),
      ),
    );
    expect(outcomes.map((o) => o.status)).to.deep.equal(
      keys.map((key) => (key === 'poison' ? 'rejected' : 'fulfilled')),
    );
    expect(String((outcomes[keys.indexOf('poison')] as PromiseRejectedResult).reason)).to.contain(
      'poisoned entry',
    );
    // The failed batch of seven, then each of the seven alone (SQLite's trigger refusal is a
    // constraint violation, which a lone charge tries once more: chargeOnce).
    expect(inserts.count).to.equal(1 + keys.length + (dialectOf(db) === 'postgres' ? 0 : 1));
    const balance = await batched.ledger.balance(wallet);
    expect(balance.unsettledSpend).to.equal(6000n);
    const history = await batched.ledger.history(wallet, { limit: 20, kinds: ['charge'] });
    expect(history.entries.map((entry) => entry.idempotencyKey).sort()).to.deep.equal(
      keys.filter((key) => key !== 'poison').sort(),
    );
    expect((await batched.ledger.audit(wallet)).ok).to.equal(true);
  });
});
