import { expect } from 'chai';
import { keccak256, stringToHex, type Address } from 'viem';
import { privateKeyToAccount, type LocalAccount, type PrivateKeyAccount } from 'viem/accounts';
import { balances, fundedPayer, mint } from '../services/gateway/payments/support.ts';
import { walletToken } from '../services/gateway/support.ts';
import { runtimeSession, callerServedBy, mcpSession } from './callers.ts';
import { eventually } from '../support/eventually.ts';
import {
  describeScaleOut,
  replicaSuite,
  type ReplicaProcess,
  type ReplicaSet,
  type ReplicaSettings,
} from '../support/replicas.ts';
import {
  daysOverBudget,
  ledgerBooks,
  whenQuiet,
  x402Books,
  type LedgerWallet,
  type PaidCall,
} from './books.ts';
import {
  ChatWallet,
  type ChatSession,
  payOverMcp,
  payOverRest,
  siweSignIn,
  type Outcome,
  type SiweSignIn,
} from './clients.ts';

/**
 * Issue 29, the proof: two replicas of each service behind nginx on PostgreSQL, paying on the local
 * chain, under a bounded mixed load (a fixed plan of operations drawn from SEED, a few in flight at a
 * time) of paid tool calls over REST and MCP, chats with tool calls (each message charged on the
 * ledger), withdrawals against small balances, a small daily budget, and SIWE sign-ins. During it a
 * replica of each service is SIGKILLed with work of its own in flight, then started again, at points
 * set by how many operations have completed. Each client does what the docs tell it to on an error
 * (a cut chat stream sent again with the same id, a vault unlocked again, a paid result fetched).
 * Afterwards the books must balance and every operation must have ended in a way its client can act on.
 */

/** Where every wallet, the plan's order and its mix come from: the same seed, the same load. */
const SEED = 'sigil-scaleout-proof-1';

/** How many operations of each kind the plan holds, and how many run at once. */
const MIX = {
  rest: 12,
  'rest-poor': 4,
  mcp: 8,
  chat: 12,
  withdrawals: 4,
  'siwe-runtime': 3,
  'siwe-gateway': 3,
} as const;
type Kind = keyof typeof MIX;
const CONCURRENCY = 4;

/**
 * The kills and restarts, each once this many operations have completed. Operations from GATED_FROM
 * on start only once both killed replicas run again, so the load ends on the whole set (nginx sends a
 * restarted replica requests again once its fail_timeout, 10 s, has passed).
 */
const KILL_GATEWAY_AFTER = 8;
const KILL_RUNTIME_AFTER = 16;
const RESTART_GATEWAY_AFTER = 20;
const RESTART_RUNTIME_AFTER = 24;
const GATED_FROM = 38;

/** The x402 price of a call (the rail's default) and what the payers hold. */
const PRICE = 500n;
const POOR_PAYER_CALLS = 3n;
/**
 * Deposits and the daily budget of the chat wallets, in ledger base units. A message holds ~1k (its
 * output tokens at most) and a billed tool call costs 500: the budget holds one message at a time, so
 * the two sessions' messages on two replicas contend for it, and it refuses every message once two
 * tool calls were charged.
 */
const DEPOSIT = { budget: 40_000n, poor: 25_000n, victim: 100_000n, topUp: 60_000n };
const DAILY_BUDGET = 1_800n;
/** Output tokens a model turn may use: what a message's hold reserves for them (2 base units each). */
const MAX_OUTPUT_TOKENS = 512;
/**
 * What each `withdrawals` operation asks of both ledger wallets at once, in turn: one that fits, one
 * over any balance, one that fits, one under the minimum. The two wallets' sign-ins are on different
 * runtimes, so both runtimes' transfer workers send at once, from the one ledger operator account.
 */
const WITHDRAWALS = [10_000n, 5_000_000n, 10_000n, 500n];

/**
 * What every replica's config adds: leases and heartbeats short enough that a dead replica's claims
 * are taken up within seconds, smaller holds, and the operator who may read the reconciliation.
 */
const SETTINGS = (operator: Address): ReplicaSettings => ({
  database: { heartbeatSeconds: 2, replicaDeadAfterSeconds: 8, leaseSeconds: 8 },
  runtime: { chat: { maxOutputTokens: MAX_OUTPUT_TOKENS } },
  gateway: { operatorWallets: [operator] },
});

/** An account derived from the seed and a label. */
const accountOf = (label: string): PrivateKeyAccount =>
  privateKeyToAccount(keccak256(stringToHex(`${SEED}:${label}`)));

/** A small deterministic generator (mulberry32) over the seed. */
function seededRandom(seed: string): () => number {
  let state = Number.parseInt(keccak256(stringToHex(seed)).slice(2, 10), 16);
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The plan: MIX's operations shuffled by the seed. */
function plan(): Kind[] {
  const kinds = (Object.entries(MIX) as [Kind, number][]).flatMap(([kind, n]) => Array<Kind>(n).fill(kind));
  const random = seededRandom(SEED);
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [kinds[i], kinds[j]] = [kinds[j] as Kind, kinds[i] as Kind];
  }
  return kinds;
}

/** One operation as its client recorded it. */
interface Operation {
  label: string;
  outcome: Outcome;
  /** Nonces of the x402 payments it signed. */
  nonces?: string[];
  siwe?: SiweSignIn;
}

/** Whether an operation was refused with `reason`. */
const refusedFor =
  (reason: string) =>
  ({ outcome }: Operation): boolean =>
    outcome.end === 'refused' && outcome.reason === reason;

/** Operations completed, and the counts the kills and restarts wait for. */
class Progress {
  private done = 0;
  private waiting: { count: number; resolve: () => void }[] = [];

  completed(): void {
    this.done++;
    this.waiting = this.waiting.filter((waiter) => {
      if (this.done < waiter.count) return true;
      waiter.resolve();
      return false;
    });
  }

  reached(count: number): Promise<void> {
    if (this.done >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push({ count, resolve }));
  }
}

const describeOperation = (operation: Operation): string => {
  const { outcome } = operation;
  const how =
    outcome.end === 'refused'
      ? `refused ${outcome.status} ${outcome.code}${outcome.reason ? ` (${outcome.reason})` : ''}`
      : outcome.end === 'answered'
        ? `answered ${outcome.status}`
        : `${outcome.end}: ${outcome.detail}`;
  const recovered =
    'recovered' in outcome && outcome.recovered ? ` after ${outcome.recovered.join(', ')}` : '';
  return `${operation.label}: ${how}${recovered}`;
};

/** An assertion's message: what failed, one a line, then every operation of the load (how each ended). */
const listed = (failed: string[], operations?: Operation[]): string =>
  [...failed, ...(operations ? ['-- every operation:', ...operations.map(describeOperation)] : [])].join(
    '\n',
  );

describeScaleOut(
  'the scale-out proof: a bounded mixed load while a replica of each service is killed',
  (postgresUrl) => {
    const operator = accountOf('operator');
    const set = replicaSuite({ postgresUrl, settings: SETTINGS(operator.address) });
    const operations: Operation[] = [];
    /** The chat wallets: one on a daily budget, one of small means, one whose message a kill cuts. */
    const wallets: LoadWallet[] = [];
    /** The operations in flight on a replica as it was killed: a paid call, then a chat message. */
    const killed: Operation[] = [];
    let continued: Operation[] = [];
    /** The budget wallet's messages after the load until its budget refused one. */
    let towardBudget: Operation[] = [];
    let payers: { address: Address; before: bigint }[] = [];
    let treasuryBefore = 0n;
    /** Agents' days over their daily budget at the end of the load (before the budget is lifted). */
    let overBudget: object[] = [];

    before(async function () {
      this.timeout(300_000);
      const [gatewayVictim] = set.gateways as [ReplicaProcess];
      const [runtimeVictim, runtimeSurvivor] = set.runtimes as [ReplicaProcess, ReplicaProcess];
      const balanceOf = balances(set.chain);

      // The payers of tool calls: one with plenty, one with enough for three calls, one over MCP.
      const restPayer = await fundedPayer(set.chain, 10_000_000n, accountOf('rest-payer'));
      const poorPayer = await fundedPayer(set.chain, PRICE * POOR_PAYER_CALLS, accountOf('poor-payer'));
      const mcpPayer = await fundedPayer(set.chain, 10_000_000n, accountOf('mcp-payer'));
      // The budget wallet's two sessions are answered by different runtimes, so its messages race
      // for the one budget across replicas; the victim's session is on the runtime that is killed.
      const budget = await loadWallet(
        set,
        'budget',
        [runtimeVictim, runtimeSurvivor],
        DEPOSIT.budget,
        DAILY_BUDGET,
      );
      const poor = await loadWallet(set, 'poor', [runtimeSurvivor], DEPOSIT.poor, undefined);
      const victim = await loadWallet(set, 'victim', [runtimeVictim], DEPOSIT.victim, undefined);
      wallets.push(budget, poor, victim);
      const gatewayVictimSession = await callerServedBy(set, gatewayVictim, mcpSession);
      payers = await Promise.all(
        [restPayer, poorPayer, mcpPayer, set.chain.accounts.runtime].map(async ({ address }) => ({
          address,
          before: await balanceOf(address),
        })),
      );
      treasuryBefore = await balanceOf(set.chain.accounts.treasury.address);

      const chatSessions = [...budget.sessions, ...poor.sessions];
      const count: Partial<Record<Kind, number>> = {};
      const perform = async (kind: Kind, index: number): Promise<Operation | Operation[]> => {
        const nth = (count[kind] = (count[kind] ?? 0) + 1) - 1;
        const label = `#${index} ${kind}`;
        switch (kind) {
          case 'rest':
          case 'rest-poor': {
            const payer = kind === 'rest' ? restPayer : poorPayer;
            const args = { message: label };
            return { label, ...(await payOverRest({ ...paying(set, payer), tool: 'echo', args })) };
          }
          case 'mcp':
            return { label, ...(await payOverMcp({ ...paying(set, mcpPayer), message: label })) };
          case 'chat': {
            const session = chatSessions[nth % chatSessions.length] as ChatSession;
            const content =
              Math.floor(nth / chatSessions.length) % 2 === 0
                ? `hello ${index}`
                : `use tool probe__echo with {"message":"${label}"}`;
            const said = await session.message(content, `proof-${index}`);
            return {
              label: `${label} (${session.wallet.name}: ${content}) ${said.tools.join('; ')}`,
              ...said,
            };
          }
          case 'withdrawals': {
            const amount = WITHDRAWALS[nth % WITHDRAWALS.length] as bigint;
            return Promise.all(
              [budget, poor].map(async ({ wallet, sessions }) => ({
                label: `${label} (${wallet.name}: ${amount})`,
                outcome: await wallet.withdraw(sessions[0]!.jwt, amount, `proof-${index}`),
              })),
            );
          }
          case 'siwe-runtime':
          case 'siwe-gateway': {
            const runtime = kind === 'siwe-runtime';
            const siwe = await siweSignIn({
              balancerUrl: runtime ? set.runtimeUrl : set.gatewayUrl,
              replicaUrls: (runtime ? set.runtimes : set.gateways).map((replica) => replica.url),
              prefix: runtime ? '/auth' : '/api/auth',
              account: accountOf(label),
            });
            return { label, outcome: siwe.outcome, siwe };
          }
        }
      };

      const kinds = plan();
      const progress = new Progress();
      let restarted!: () => void;
      const bothBack = new Promise<void>((resolve) => (restarted = resolve));
      // The kills and restarts, in the background as the load runs.
      const acts = (async () => {
        await progress.reached(KILL_GATEWAY_AFTER);
        killed.push(await killWithPaidCallInFlight(set, gatewayVictim, restPayer, gatewayVictimSession));
        await progress.reached(KILL_RUNTIME_AFTER);
        killed.push(await killWithChatInFlight(set, runtimeVictim, victim.sessions[0]!));
        await progress.reached(RESTART_GATEWAY_AFTER);
        await set.restart(gatewayVictim);
        await progress.reached(RESTART_RUNTIME_AFTER);
        await set.restart(runtimeVictim);
        restarted();
      })();
      let next = 0;
      const worker = async () => {
        for (let index = next++; index < kinds.length; index = next++) {
          if (index >= GATED_FROM) await bothBack;
          operations.push(...[await perform(kinds[index] as Kind, index)].flat());
          progress.completed();
        }
      };
      await Promise.all([acts, ...Array.from({ length: CONCURRENCY }, worker)]);
      // The budget is reached whatever the kills and the machine's pace did to the load (a tool call a
      // kill cut is not billed, two messages may not overlap): the budget wallet calls the tool until
      // its budget refuses, at most four messages (two billed calls leave less than a message's hold).
      const refusedByBudget = refusedFor('budget_exceeded');
      towardBudget = [];
      for (let extra = 0; extra < 4 && ![...operations, ...towardBudget].some(refusedByBudget); extra++) {
        const session = budget.sessions[extra % budget.sessions.length] as ChatSession;
        const content = `use tool probe__echo with {"message":"toward the budget ${extra}"}`;
        const said = await session.message(content, `proof-budget-${extra}`);
        towardBudget.push({
          label: `toward the budget #${extra} (${content}) ${said.tools.join('; ')}`,
          ...said,
        });
      }

      overBudget = await daysOverBudget(set.db);
      // Every session goes on: its owner lifts the budget, deposits more, and says hello again.
      continued = [];
      for (const { wallet, deposit, sessions } of wallets) {
        const [first] = sessions as [ChatSession];
        await wallet.setDailyBudget(first.jwt, null);
        await depositAndWait(set, first, deposit, DEPOSIT.topUp);
        for (const [i, session] of sessions.entries()) {
          const said = await session.message('hello after the kills', `proof-after-${wallet.name}-${i}`);
          continued.push({
            label: `${wallet.name} session ${i + 1}: hello after the kills → "${said.answer}"`,
            ...said,
          });
        }
      }
      operations.push(...killed, ...towardBudget, ...continued);
    });

    it('ends every operation, in flight at a kill or not, answered or refused with a JSON error naming a code', () => {
      const unclear = operations.filter(
        (operation) => operation.outcome.end === 'unclear' || operation.outcome.end === 'hung',
      );
      expect(unclear, listed(unclear.map(describeOperation), operations)).to.be.empty;
      // The plan's (a withdrawals operation is two), the two cut by the kills, those toward the budget
      // and each session's message after them.
      expect(operations).to.have.length(
        plan().length + MIX.withdrawals + killed.length + towardBudget.length + continued.length,
      );
      // The kills cut work in flight: the paid call got the balancer's JSON error, the chat message's
      // stream was cut (or the balancer answered for it) and its client resumed it.
      const [paidCall, chatMessage] = killed as [Operation, Operation];
      expect(paidCall.outcome, describeOperation(paidCall)).to.include({
        end: 'refused',
        status: 502,
        code: 'unavailable',
      });
      const recovered = 'recovered' in chatMessage.outcome ? (chatMessage.outcome.recovered ?? []) : [];
      expect(recovered.join(', '), describeOperation(chatMessage)).to.match(
        /^(stream cut|replica_unanswered): resumed/,
      );
    });

    it('charges no payment twice and loses none: records, AuthorizationUsed events and balances agree, the reconciler finds nothing', async function () {
      this.timeout(120_000);
      const calls: PaidCall[] = operations
        .filter((operation) => operation.nonces !== undefined)
        .map((operation) => ({
          label: operation.label,
          nonces: operation.nonces as string[],
          answered: operation.outcome.end === 'answered',
        }));
      const read = async () =>
        x402Books({
          chain: set.chain,
          db: set.db,
          treasury: { address: set.chain.accounts.treasury.address, before: treasuryBefore },
          payers,
          calls,
          sweptToTreasury: await sweptToTreasury(set),
        });
      // Settlements a killed replica left under way are completed by the others' retry workers.
      const books = await whenQuiet('the books balanced', read);
      expect(books.problems, listed(books.problems, operations)).to.be.empty;
      expect(books.settled, 'paid calls settled').to.be.greaterThan(0);
      const { token } = await walletToken(set.gatewayUrl, operator);
      const response = await fetch(`${set.gatewayUrl}/api/payments/reconciliation`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(response.status).to.equal(200);
      const report = (await response.json()) as { checked: number; onChain: number; mismatches: unknown[] };
      expect(report.mismatches, JSON.stringify(report.mismatches)).to.be.empty;
      expect(report.checked).to.equal(books.rows.length);
      expect(report.onChain).to.equal(books.settled);
    });

    it('keeps the ledger invariant, no agent over its daily budget, and the ledger and the chain agreeing', async function () {
      this.timeout(120_000);
      expect(overBudget, `days over an agent's daily budget: ${JSON.stringify(overBudget)}`).to.be.empty;
      const ledgerWallets: LedgerWallet[] = wallets.map(({ wallet, deposit }) => ({
        name: wallet.name,
        address: wallet.account.address,
        deposit,
      }));
      // Withdrawals a killed replica left open are finished by the other's transfer worker.
      const books = await whenQuiet('the ledger settled', () =>
        ledgerBooks({ chain: set.chain, db: set.db, wallets: ledgerWallets }),
      );
      const mismatches = JSON.stringify(books.mismatches, (_, value: unknown) =>
        typeof value === 'bigint' ? value.toString() : value,
      );
      expect(books.problems, listed([...books.problems, `audit: ${mismatches}`])).to.be.empty;
      const refused = (reason: string) => operations.filter(refusedFor(reason));
      expect(refused('budget_exceeded'), 'the budget refused a message').to.not.be.empty;
      expect(refused('insufficient_funds'), 'the small balances refused a withdrawal').to.not.be.empty;
    });

    it('accepts each SIWE nonce once, whichever replica or the balancer its replays reach, then or after the restarts', async () => {
      const signIns = operations.filter((operation) => operation.siwe !== undefined);
      expect(signIns).to.have.length(MIX['siwe-runtime'] + MIX['siwe-gateway']);
      const acceptedNonces: string[] = [];
      for (const { label, siwe } of signIns) {
        const { attempts, nonce } = siwe!;
        const said = `${label}: ${JSON.stringify(attempts)}`;
        const accepted = attempts.filter((attempt) => attempt.status === 200).length;
        expect(accepted, said).to.be.at.most(1);
        if (accepted === 1 && nonce !== undefined) acceptedNonces.push(nonce);
        // A replica's verdict (200, 401); at a replica's own address, no connection once it was
        // killed (0); at the balancer, its JSON error for a replica that died answering (502).
        for (const attempt of attempts)
          expect(attempt.at === 'balancer' ? [200, 401, 502] : [0, 200, 401], said).to.include(
            attempt.status,
          );
        // With every attempt judged by a live replica, exactly one was accepted.
        if (attempts.every((attempt) => attempt.status === 200 || attempt.status === 401))
          expect(accepted, said).to.equal(1);
      }
      const used = (await set.db('siwe_nonces').whereIn('nonce', acceptedNonces).select('nonce')) as {
        nonce: string;
      }[];
      expect(used.map((row) => row.nonce).sort()).to.deep.equal([...acceptedNonces].sort());
      // An accepted one sent again after the kills and restarts, to every replica of its service: each
      // refuses it.
      for (const { label, siwe } of signIns.filter(({ siwe }) => acceptedNonces.includes(siwe!.nonce!))) {
        const replicas = label.includes('runtime') ? set.runtimes : set.gateways;
        const later = await siwe!.replay(replicas.map((replica) => replica.url));
        expect(
          later.map((attempt) => attempt.status),
          `${label}, replayed`,
        ).to.deep.equal(replicas.map(() => 401));
      }
    });

    it('continues every chat session: a message after the kills and restarts is answered', () => {
      expect(continued).to.have.length(wallets.flatMap((wallet) => wallet.sessions).length);
      const unanswered = continued.filter((operation) => operation.outcome.end !== 'answered');
      expect(unanswered, listed(unanswered.map(describeOperation))).to.be.empty;
    });
  },
);

/** The clients' view of the paying side: the balancer, the chain, and who pays. */
const paying = (set: ReplicaSet, payer: LocalAccount) => ({
  gatewayUrl: set.gatewayUrl,
  chain: set.chain,
  payer,
});

/** Completed ledger sweeps, which pay the treasury too. */
async function sweptToTreasury(set: ReplicaSet): Promise<bigint> {
  const rows = (await set
    .db('ledger_transfers')
    .where({ kind: 'sweep', state: 'completed' })
    .select('amount')) as {
    amount: string;
  }[];
  return rows.reduce((sum, row) => sum + BigInt(row.amount), 0n);
}

/** A chat wallet of the load: its deposit address, and a session per runtime it was signed in on. */
interface LoadWallet {
  wallet: ChatWallet;
  deposit: Address;
  sessions: ChatSession[];
}

/**
 * A chat wallet signed in once for each of `replicas`, each time until the balancer sends its session
 * JWT there, its key stored with the first sign-in and the vault unlocked with the others (each on its
 * replica), `deposit` deposited and counted, an agent (with a daily budget when given), and a session
 * for each sign-in.
 */
async function loadWallet(
  set: ReplicaSet,
  name: string,
  replicas: ReplicaProcess[],
  deposit: bigint,
  dailyBudget: bigint | undefined,
): Promise<LoadWallet> {
  const wallet = new ChatWallet(name, accountOf(`chat-${name}`), set.runtimeUrl);
  const jwts: string[] = [];
  for (const replica of replicas) {
    const jwt = await callerServedBy(set, replica, { ...runtimeSession, make: () => wallet.signIn() });
    await (jwts.length === 0 ? wallet.storeKey(jwt) : wallet.unlock(jwt));
    jwts.push(jwt);
  }
  const [first] = jwts as [string];
  const address = (await wallet.client(first).json('GET', '/wallet/deposit-address')).body.address as Address;
  await wallet.openAgent(first, dailyBudget);
  const sessions = await Promise.all(jwts.map((jwt) => wallet.openSession(jwt)));
  await depositAndWait(set, sessions[0]!, address, deposit);
  return { wallet, deposit: address, sessions };
}

/** Mints `amount` to the wallet's deposit address and waits until its ledger counts it. */
async function depositAndWait(
  set: ReplicaSet,
  session: ChatSession,
  address: Address,
  amount: bigint,
): Promise<void> {
  const client = session.wallet.client(session.jwt);
  const available = async () =>
    BigInt((await client.json('GET', '/wallet/balance')).body.available as string);
  const before = await available();
  await mint(set.chain, address, amount);
  await eventually(
    `${session.wallet.name}'s deposit counted`,
    async () => (await available()) >= before + amount,
    30_000,
  );
}

/**
 * SIGKILLs the gateway `victim` while a paid call runs on it: the `sleep` tool, paid, sent with an
 * X-MCP-Session the balancer hashes to it; killed once its settlement record says it is executing.
 */
async function killWithPaidCallInFlight(
  set: ReplicaSet,
  victim: ReplicaProcess,
  payer: LocalAccount,
  session: string,
): Promise<Operation> {
  const call = payOverRest({
    gatewayUrl: set.gatewayUrl,
    chain: set.chain,
    payer,
    tool: 'sleep',
    args: { ms: 60_000 },
    headers: { 'x-mcp-session': session },
  });
  await eventually(
    `the paid call running on ${victim.name}`,
    async () =>
      set.db('payment_settlements').where({ state: 'executing' }).whereLike('resource', '%sleep%').first(),
    30_000,
  );
  await set.kill(victim);
  return { label: `a paid sleep in flight on ${victim.name} as it was killed`, ...(await call) };
}

/**
 * SIGKILLs the runtime `victim` while it answers a chat message of `wallet` (whose session JWT the
 * balancer sends to it) that calls the gateway's `sleep` tool: killed once the session's claim names
 * the victim and the tool's paid call runs on a gateway.
 */
async function killWithChatInFlight(
  set: ReplicaSet,
  victim: ReplicaProcess,
  session: ChatSession,
): Promise<Operation> {
  const replica = (await set.db('replicas').where({ pid: victim.pid }).first('id')) as { id: string };
  const content = 'use tool probe__sleep with {"ms":5000}';
  const message = session.message(content, 'proof-runtime-kill');
  await eventually(
    `a chat message answered by ${victim.name}, its tool call running`,
    async () =>
      (await set.db('chat_sessions').where({ id: session.id, answering_by: replica.id }).first()) &&
      set
        .db('payment_settlements')
        .where({ state: 'executing' })
        .whereLike('resource', '%sleep%')
        .whereRaw('lower(payer) = ?', [set.chain.accounts.runtime.address.toLowerCase()])
        .first(),
    60_000,
  );
  await set.kill(victim);
  const said = await message;
  return {
    label: `a chat message of ${session.wallet.name} in flight on ${victim.name} as it was killed (${content}) ${said.tools.join('; ')}`,
    ...said,
  };
}
