import { expect } from 'chai';
import { ManualClock } from '../../../../core/clock.ts';
import { Services, newWallet } from '../../../core/auth/support.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import type { Ledger } from '../../../../services/runtime/ledger/ledger.ts';
import { createLedgerService } from '../../../../services/runtime/ledger/service.ts';
import { pluginsWithLocalProvider } from '../support.ts';
import { MIDWEEK, setOnChain } from './support.ts';

describeEachDatabase('ledger: routes (wallet-authenticated, owner-only)', (database) => {
  let services: Services;
  let ledger: Ledger;
  let alice: ReturnType<typeof newWallet>;
  let aliceJwt: string;
  let bobJwt: string;

  before(async () => {
    services = await Services.start({
      database,
      clock: new ManualClock(MIDWEEK),
      config: { plugins: pluginsWithLocalProvider() },
    });
    ledger = (await createLedgerService(services.kernel)).ledger;
    alice = newWallet();
    [aliceJwt, bobJwt] = await Promise.all([
      services.signIn('runtime', alice),
      services.signIn('runtime', newWallet()),
    ]);
  });
  after(() => services?.close());

  const send = (method: string, path: string, jwt: string | undefined, body?: unknown) =>
    services.fetch('runtime', path, {
      method,
      headers: {
        ...(jwt ? { authorization: `Bearer ${jwt}` } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
  const json = async (res: Response) => (await res.json()) as Record<string, unknown>;
  async function createAgent(jwt = aliceJwt): Promise<string> {
    const res = await send('POST', '/agents', jwt, { name: 'helper', model: 'sigil-echo' });
    expect(res.status).to.equal(201);
    return (await json(res)).id as string;
  }

  it('every ledger and agent route needs a session: 401 without one', async () => {
    for (const [method, path] of [
      ['GET', '/wallet/balance'],
      ['GET', '/wallet/transactions'],
      ['GET', '/wallet/deposit-address'],
      ['GET', '/wallet/withdrawals'],
      ['POST', '/wallet/withdrawals'],
      ['GET', '/wallet/withdrawals/00000000-0000-4000-8000-000000000000'],
      ['GET', '/agents'],
      ['POST', '/agents'],
      ['GET', '/agents/00000000-0000-4000-8000-000000000000/budgets'],
      ['PUT', '/agents/00000000-0000-4000-8000-000000000000/budgets'],
      ['POST', '/agents/00000000-0000-4000-8000-000000000000/budget-check'],
    ] as const) {
      const res = await send(method, path, undefined, method === 'GET' ? undefined : {});
      expect(res.status, `${method} ${path}`).to.equal(401);
    }
  });

  it('POST /agents refuses a model no provider offers: 400 model_not_offered naming the offered ones, nothing stored', async () => {
    const res = await send('POST', '/agents', aliceJwt, { name: 'helper', model: 'gpt-nowhere' });
    expect(res.status).to.equal(400);
    const body = await json(res);
    expect(body.code).to.equal('invalid_request');
    expect(body.details).to.deep.include({ reason: 'model_not_offered', model: 'gpt-nowhere' });
    expect(body.details).to.have.property('offered').that.includes('sigil-echo');
    expect(body.hint).to.include('sigil-echo');
    const listed = (await json(await send('GET', '/agents', aliceJwt))).agents as { model: string }[];
    expect(listed.map((agent) => agent.model)).to.not.include('gpt-nowhere');
    const stored = await services.kernel.db('agents').where({ model: 'gpt-nowhere' }).count({ n: '*' });
    expect(Number(stored[0]?.n)).to.equal(0);
  });

  it('POST /agents creates an agent of the caller; GET lists only the caller’s; another wallet gets 404', async () => {
    const id = await createAgent();
    const mine = await json(await send('GET', '/agents', aliceJwt));
    expect((mine.agents as { id: string }[]).map((a) => a.id)).to.include(id);
    const theirs = await json(await send('GET', '/agents', bobJwt));
    expect((theirs.agents as { id: string }[]).map((a) => a.id)).to.not.include(id);
    expect((await send('GET', `/agents/${id}`, aliceJwt)).status).to.equal(200);
    const stranger = await send('GET', `/agents/${id}`, bobJwt);
    expect(stranger.status).to.equal(404);
    expect((await json(stranger)).code).to.equal('not_found');
  });

  it('GET /wallet/balance: the four ledger figures in base units, the rule, and the minimum balance', async () => {
    const id = await createAgent();
    await setOnChain(ledger, alice.address, 2_000_000n);
    await ledger.charge({ wallet: alice.address, agentId: id, amount: 250_000n, idempotencyKey: 'r1' });
    const body = await json(await send('GET', '/wallet/balance', aliceJwt));
    expect(body).to.deep.include({
      wallet: alice.address,
      onChainBalance: '2000000',
      unsettledSpend: '250000',
      pendingWithdrawals: '0',
      available: '1750000',
      minimumBalance: '10000',
    });
    expect(body.token).to.deep.include({ decimals: 6, chainId: 8453 });
    const bob = await json(await send('GET', '/wallet/balance', bobJwt));
    expect(bob).to.include({ onChainBalance: '0', available: '0' });
  });

  it('PUT /agents/:id/budgets sets limits (omitted ones kept, null clears); GET shows spend, remaining and resets', async () => {
    const id = await createAgent();
    let res = await send('PUT', `/agents/${id}/budgets`, aliceJwt, { daily: '1000', weekly: 5000 });
    expect(res.status).to.equal(200);
    res = await send('PUT', `/agents/${id}/budgets`, aliceJwt, { monthly: '9000', weekly: null });
    const body = await json(res);
    expect(body).to.deep.include({ agentId: id, windows: 'calendar-utc' });
    expect(body.daily).to.deep.equal({
      limit: '1000',
      spent: '0',
      held: '0',
      remaining: '1000',
      start: '2026-03-18T00:00:00.000Z',
      resetsAt: '2026-03-19T00:00:00.000Z',
    });
    expect(body.weekly).to.include({ limit: null, remaining: null, resetsAt: '2026-03-23T00:00:00.000Z' });
    expect(body.monthly).to.include({ limit: '9000', resetsAt: '2026-04-01T00:00:00.000Z' });
    expect(await json(await send('GET', `/agents/${id}/budgets`, aliceJwt))).to.deep.equal(body);
    expect((await send('GET', `/agents/${id}/budgets`, bobJwt)).status).to.equal(404);
    expect((await send('PUT', `/agents/${id}/budgets`, bobJwt, { daily: '1' })).status).to.equal(404);
  });

  it('POST /agents/:id/budget-check: 402 naming the limit, what is left and when it resets; 200 when allowed', async () => {
    const id = await createAgent();
    await send('PUT', `/agents/${id}/budgets`, aliceJwt, { daily: '1000' });
    let res = await send('POST', `/agents/${id}/budget-check`, aliceJwt, { amount: '1001' });
    expect(res.status).to.equal(402);
    const refusal = await json(res);
    expect(refusal.code).to.equal('payment_required');
    expect(refusal.details).to.deep.include({
      reason: 'budget_exceeded',
      limit: 'daily',
      remaining: '1000',
      limitAmount: '1000',
      resetsAt: '2026-03-19T00:00:00.000Z',
    });
    expect(refusal.hint).to.be.a('string');
    res = await send('POST', `/agents/${id}/budget-check`, aliceJwt, { amount: '1000' });
    expect(res.status).to.equal(200);
    expect(await json(res)).to.include({ allowed: true, amount: '1000' });
    // A wallet with nothing deposited is below the minimum balance.
    const bobAgent = await createAgent(bobJwt);
    res = await send('POST', `/agents/${bobAgent}/budget-check`, bobJwt, {});
    expect(res.status).to.equal(402);
    expect((await json(res)).details).to.include({
      reason: 'minimum_balance',
      limit: 'minimum_balance',
      remaining: '0',
    });
  });

  it('bad input is a 400 naming the field, and changes nothing', async () => {
    const id = await createAgent();
    await send('PUT', `/agents/${id}/budgets`, aliceJwt, { daily: '500' });
    const cases: [string, string, unknown, RegExp][] = [
      ['PUT', `/agents/${id}/budgets`, { daily: '1.5' }, /body\.daily/],
      ['PUT', `/agents/${id}/budgets`, { daily: -1 }, /body\.daily/],
      ['PUT', `/agents/${id}/budgets`, { daily: '1e6' }, /body\.daily/],
      ['PUT', `/agents/${id}/budgets`, { daily: 0.5 }, /body\.daily/],
      ['PUT', `/agents/${id}/budgets`, { daily: '10000000000000001' }, /body\.daily/],
      ['PUT', `/agents/${id}/budgets`, { yearly: '5' }, /body/],
      ['PUT', `/agents/${id}/budgets`, {}, /at least one/],
      ['PUT', `/agents/${id}/budgets`, '{"daily": ', /JSON/],
      ['PUT', '/agents/not-a-uuid/budgets', { daily: '1' }, /params\.id/],
      ['POST', `/agents/${id}/budget-check`, { amount: 'ten' }, /body\.amount/],
      ['POST', '/agents', { name: '', model: 'm' }, /body\.name/],
      ['POST', '/agents', { name: 'n', model: 'm', extra: 1 }, /body/],
      ['GET', '/wallet/transactions?limit=0', undefined, /query\.limit/],
      ['GET', '/wallet/transactions?limit=201', undefined, /query\.limit/],
      ['GET', '/wallet/transactions?kind=bogus', undefined, /query\.kind/],
      ['GET', '/wallet/transactions?cursor=nonsense', undefined, /cursor/],
      ['POST', '/wallet/withdrawals', { amount: '1.5', idempotencyKey: 'k' }, /body\.amount/],
      ['POST', '/wallet/withdrawals', { amount: '0', idempotencyKey: 'k' }, /body\.amount/],
      ['POST', '/wallet/withdrawals', { amount: '100' }, /body\.idempotencyKey/],
      ['POST', '/wallet/withdrawals', { amount: '100', idempotencyKey: 'a b' }, /body\.idempotencyKey/],
      ['POST', '/wallet/withdrawals', { amount: '100', idempotencyKey: 'k', to: 5 }, /body\.to/],
      ['POST', '/wallet/withdrawals', { amount: '100', idempotencyKey: 'k', memo: 'x' }, /body/],
      ['GET', '/wallet/withdrawals/not-a-uuid', undefined, /params\.id/],
      ['GET', '/wallet/withdrawals?limit=abc', undefined, /query\.limit/],
    ];
    for (const [method, path, body, message] of cases) {
      const res = await send(method, path, aliceJwt, body);
      expect(res.status, `${method} ${path} ${JSON.stringify(body)}`).to.equal(400);
      const error = await json(res);
      expect(error.code).to.equal('invalid_request');
      expect(error.message).to.match(message);
    }
    const budgets = await json(await send('GET', `/agents/${id}/budgets`, aliceJwt));
    expect((budgets.daily as { limit: string }).limit).to.equal('500');
  });

  it('withdrawals need a chain: without one POST /wallet/withdrawals is a 503 with a hint, and nothing is recorded', async () => {
    const res = await send('POST', '/wallet/withdrawals', aliceJwt, {
      amount: '100000',
      idempotencyKey: 'w',
    });
    expect(res.status).to.equal(503);
    const body = await json(res);
    expect(body.code).to.equal('unavailable');
    expect(body.hint).to.match(/ledger\.rpcUrl/);
    const list = await json(await send('GET', '/wallet/withdrawals', aliceJwt));
    expect(list.withdrawals).to.deep.equal([]);
    expect(
      (await send('GET', '/wallet/withdrawals/00000000-0000-4000-8000-000000000000', aliceJwt)).status,
    ).to.equal(404);
    expect((await send('GET', '/wallet/deposit-address', aliceJwt)).status).to.equal(503);
  });

  it('GET /wallet/transactions pages newest first with a cursor; appends never shift a page; owner only', async () => {
    const wallet = newWallet();
    const jwt = await services.signIn('runtime', wallet);
    const id = await createAgent(jwt);
    await setOnChain(ledger, wallet.address, 1_000_000n);
    for (let i = 1; i <= 7; i++) {
      await ledger.charge({
        wallet: wallet.address,
        agentId: id,
        amount: BigInt(i),
        idempotencyKey: `t${i}`,
      });
    }
    const first = await json(await send('GET', '/wallet/transactions?limit=3', jwt));
    const amounts = (page: Record<string, unknown>) =>
      (page.transactions as { amount: string }[]).map((t) => t.amount);
    expect(amounts(first)).to.deep.equal(['7', '6', '5']);
    expect(first.transactions as unknown[]).to.have.length(3);
    expect((first.transactions as Record<string, unknown>[])[0]).to.include({
      kind: 'charge',
      agentId: id,
      idempotencyKey: 't7',
    });
    await ledger.charge({ wallet: wallet.address, agentId: id, amount: 8n, idempotencyKey: 't8' });
    const second = await json(
      await send('GET', `/wallet/transactions?limit=3&cursor=${first.nextCursor as string}`, jwt),
    );
    expect(amounts(second)).to.deep.equal(['4', '3', '2']);
    const third = await json(
      await send('GET', `/wallet/transactions?limit=3&cursor=${second.nextCursor as string}`, jwt),
    );
    expect(amounts(third)).to.deep.equal(['1']);
    expect(third.nextCursor).to.equal(null);
    const others = await json(await send('GET', '/wallet/transactions', bobJwt));
    expect(amounts(others)).to.not.include('7');
    const filtered = await json(await send('GET', '/wallet/transactions?kind=deposit', jwt));
    expect(filtered.transactions).to.deep.equal([]);
  });
});
