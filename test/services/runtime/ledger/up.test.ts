import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Address, Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { DEV_DEPOSIT_MNEMONIC } from '../../../../services/runtime/ledger/config.ts';
import { devWallet } from '../../../../devchain/index.ts';
import type { DevChain } from '../../../support/chain.ts';
import { freePort, parseBanner, startSigil } from '../../../support/cli.ts';
import { sendToken, tokenBalance } from './chain-support.ts';
import { eventually } from './support.ts';

const USD = 1_000_000n;
const LEDGER_BANNER_END = /deposit addresses come from this public dev mnemonic.*\n/;

/** The ledger tried as a new user would: `sigil up`, the printed dev wallet, HTTP only. */
describe('ledger: sigil up, as a new user', function () {
  this.timeout(120_000);
  let dir: string;
  let up: Awaited<ReturnType<typeof startSigil>> | undefined;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-ledger-up-'));
  });
  after(async () => {
    up?.child.kill('SIGTERM');
    await up?.exited;
    rmSync(dir, { recursive: true, force: true });
  });

  it('deposit on anvil, available after the confirmations, budgets refuse as documented, a withdrawal completes; chain and ledger agree', async () => {
    up = await startSigil(['up'], LEDGER_BANNER_END, {
      cwd: dir,
      env: {
        DATABASE_URL: join(dir, 'sigil.db'),
        SIGIL_CONFIG: '',
        GATEWAY_WARMUP: 'false',
        RUNTIME_PORT: String(await freePort()),
        GATEWAY_PORT: String(await freePort()),
        DEV_CHAIN: '',
        DEV_CHAIN_PORT: '',
      },
    });
    const output = up.output();
    expect(output).to.include(`  mnemonic ${DEV_DEPOSIT_MNEMONIC}`);
    expect(output).to.match(/ledger\s+deposits on the dev chain count after 1 confirmation/);
    const banner = parseBanner(output);
    const runtime = /^runtime\s+(http:\/\/\S+)$/m.exec(output)![1]!;
    // The chain as the banner describes it (the operator is anvil's first dev account).
    const chain = {
      rpcUrl: banner.rpcUrl,
      chainId: banner.chainId,
      token: { address: banner.token },
      accounts: {
        operator: devWallet(0),
        payer: { address: banner.payer, privateKey: banner.key },
        treasury: { address: banner.treasury },
      },
    } as unknown as DevChain;
    const payer = privateKeyToAccount(banner.key as Hex);

    const jwt = await signIn(runtime, payer);
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${runtime}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${jwt}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };

    const deposit = (await call('GET', '/wallet/deposit-address')).body;
    expect(deposit).to.deep.include({ confirmations: 1, watching: true });
    // Where to send it: the OS picked the chain's port, so the answer says (examples/first-chat.mjs).
    expect(deposit.token).to.deep.include({
      chainId: banner.chainId,
      address: banner.token,
      rpcUrl: banner.rpcUrl,
    });
    const depositAddress = deposit.address as Address;
    const payerBefore = await tokenBalance(chain, payer.address);
    await sendToken(chain, payer, depositAddress, 10n * USD);
    const funded = await eventually('the deposit in the balance', async () => {
      const read = (await call('GET', '/wallet/balance')).body;
      return read.available === String(10n * USD) ? read : undefined;
    });
    expect(funded).to.include({
      onChainBalance: String(10n * USD),
      unsettledSpend: '0',
      pendingWithdrawals: '0',
    });

    const agent = (await call('POST', '/agents', { name: 'helper', model: 'sigil-echo' })).body;
    expect(
      (await call('PUT', `/agents/${agent.id as string}/budgets`, { daily: String(USD) })).status,
    ).to.equal(200);
    const refused = await call('POST', `/agents/${agent.id as string}/budget-check`, {
      amount: String(2n * USD),
    });
    expect(refused.status).to.equal(402);
    expect(refused.body.details).to.include({
      reason: 'budget_exceeded',
      limit: 'daily',
      remaining: String(USD),
    });
    const allowed = await call('POST', `/agents/${agent.id as string}/budget-check`, { amount: String(USD) });
    expect(allowed.status).to.equal(200);

    const requested = await call('POST', '/wallet/withdrawals', {
      amount: String(4n * USD),
      idempotencyKey: 'first',
    });
    expect(requested.status).to.equal(202);
    expect(requested.body).to.include({ to: payer.address, amount: String(4n * USD) });
    const done = await eventually('the withdrawal', async () => {
      const read = (await call('GET', `/wallet/withdrawals/${requested.body.id as string}`)).body;
      return read.status === 'completed' ? read : undefined;
    });
    expect(done.transactionHash).to.match(/^0x[0-9a-f]{64}$/);
    const after = await eventually('the balance after the withdrawal', async () => {
      const read = (await call('GET', '/wallet/balance')).body;
      return read.onChainBalance === String(6n * USD) ? read : undefined;
    });
    expect(after).to.include({
      available: String(6n * USD),
      pendingWithdrawals: '0',
      withdrawn: String(4n * USD),
    });
    expect(await tokenBalance(chain, depositAddress)).to.equal(6n * USD);
    expect(await tokenBalance(chain, payer.address)).to.equal(payerBefore - 6n * USD);
    const list = (await call('GET', '/wallet/withdrawals')).body;
    expect((list.withdrawals as { id: string }[]).map((w) => w.id)).to.deep.equal([requested.body.id]);
    expect(list.limits).to.deep.equal({
      minAmount: '10000',
      maxAmount: '1000000000',
      dailyTotal: '2000000000',
      maxPerHour: 5,
    });
    // Owner only: another wallet neither sees nor finds it.
    const stranger = await signIn(runtime, privateKeyToAccount(generatePrivateKey()));
    const theirs = await fetch(`${runtime}/wallet/withdrawals/${requested.body.id as string}`, {
      headers: { authorization: `Bearer ${stranger}` },
    });
    expect(theirs.status).to.equal(404);
    const history = (await call('GET', '/wallet/transactions')).body.transactions as { kind: string }[];
    expect(history.map((t) => t.kind)).to.deep.equal(['withdrawal_complete', 'withdrawal_hold', 'deposit']);
  });
});

async function signIn(runtime: string, account: PrivateKeyAccount): Promise<string> {
  const { message } = (await (
    await fetch(`${runtime}/auth/challenge?address=${account.address}`)
  ).json()) as {
    message: string;
  };
  const res = await fetch(`${runtime}/auth/verify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message, signature: await account.signMessage({ message }) }),
  });
  expect(res.status).to.equal(200);
  return ((await res.json()) as { token: string }).token;
}
