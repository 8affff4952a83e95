import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { keccak256, type Address, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { openDatabase, type Database } from '../../../../core/db/database.ts';
import { RpcProxy, sendsTransaction } from '../../gateway/payments/support.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { freePort, startSigil } from '../../../support/cli.ts';
import { fundedAccount, ledgerOnChain, sendToken, tokenBalance } from './chain-support.ts';
import { eventually } from './support.ts';

const USD = 1_000_000n;

/**
 * A `sigil runtime` process SIGKILLed in the middle of a withdrawal, then started again on the same
 * SQLite file: the withdrawal is finished exactly once, and records and chain agree.
 */
describe('ledger: a runtime killed mid-withdrawal, then restarted (SQLite)', function () {
  this.timeout(120_000);
  let chain: DevChain;
  let proxy: RpcProxy;
  let dir: string;
  let configFile: string;
  let records: Database;
  let running: Awaited<ReturnType<typeof startSigil>> | undefined;
  let url: string;
  let user: PrivateKeyAccount;
  let jwt: string;
  let deposit: Address;

  before(async () => {
    chain = await startDevChain();
    proxy = await RpcProxy.start(chain.rpcUrl);
    dir = mkdtempSync(join(tmpdir(), 'sigil-ledger-crash-'));
    configFile = join(dir, 'sigil.config.json');
    const port = await freePort();
    writeFileSync(
      configFile,
      JSON.stringify({
        database: { url: join(dir, 'sigil.db') },
        log: { level: 'warn' },
        runtime: { port },
        ledger: ledgerOnChain(chain, { rpcUrl: proxy.url, confirmations: 1, pollIntervalMs: 100 }),
        plugins: [{ resolve: 'tee-none', enabled: true, options: {} }],
      }),
    );
    await start();
    records = await openDatabase({ url: join(dir, 'sigil.db') });
    user = privateKeyToAccount(generatePrivateKey());
    jwt = await signIn(user);
    deposit = ((await get('/wallet/deposit-address')) as { address: Address }).address;
    const funder = await fundedAccount(chain, 100n * USD);
    await sendToken(chain, funder, deposit, 20n * USD);
    await eventually('the deposit', async () => (await balance()).onChainBalance === String(20n * USD));
  });
  after(async () => {
    running?.child.kill('SIGKILL');
    await running?.exited;
    await records?.destroy();
    await proxy?.stop();
    await chain?.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  afterEach(() => {
    proxy.intercept = undefined;
  });

  async function start(): Promise<void> {
    running = await startSigil(['--config', configFile, 'runtime'], /runtime\s+http:\/\/\S+\n/, {
      env: { LOG_LEVEL: 'warn' },
    });
    url = /runtime\s+(http:\/\/\S+)\n/.exec(running.output())![1]!;
  }
  async function kill(): Promise<void> {
    running!.child.kill('SIGKILL');
    expect(await running!.exited).to.equal(null);
    running = undefined;
  }
  async function signIn(account: PrivateKeyAccount): Promise<string> {
    const challenge = (await (await fetch(`${url}/auth/challenge?address=${account.address}`)).json()) as {
      message: string;
    };
    const verified = await fetch(`${url}/auth/verify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        message: challenge.message,
        signature: await account.signMessage({ message: challenge.message }),
      }),
    });
    return ((await verified.json()) as { token: string }).token;
  }
  const get = async (path: string): Promise<unknown> =>
    (await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${jwt}` } })).json();
  const balance = async () => (await get('/wallet/balance')) as Record<string, string>;
  const withdraw = (amount: bigint, to: Address, idempotencyKey: string) =>
    fetch(`${url}/wallet/withdrawals`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${jwt}` },
      body: JSON.stringify({ amount: amount.toString(), to, idempotencyKey }),
    });
  const rowOf = async (id: string) =>
    (await records('ledger_transfers').where({ id }).first('state', 'tx_hash', 'signed_tx')) as
      { state: string; tx_hash: string | null; signed_tx: Hex | null } | undefined;
  async function expectAgreement(): Promise<void> {
    const read = await balance();
    expect(read.onChainBalance).to.equal(String(await tokenBalance(chain, deposit)));
    expect(read.pendingWithdrawals).to.equal('0');
    const units = (field: string) => BigInt(read[field] as string);
    expect(units('available')).to.equal(
      units('onChainBalance') - units('unsettledSpend') - units('pendingWithdrawals'),
    );
  }

  it('killed between pending and the transfer (the send never reached the chain): the restart transfers it, once', async () => {
    const to = privateKeyToAccount(generatePrivateKey()).address;
    let killed: Promise<void> | undefined;
    proxy.intercept = (methods) => {
      if (!sendsTransaction(methods)) return 'forward';
      killed ??= kill();
      return killed.then(() => 'cut' as const);
    };
    const sent = proxy.transactionsSent();
    const res = await withdraw(3n * USD, to, 'crash-1');
    expect(res.status).to.equal(202);
    const { id } = (await res.json()) as { id: string };
    await eventually('the kill', async () => killed !== undefined);
    await killed;
    proxy.intercept = undefined;
    const killedRow = (await rowOf(id))!;
    expect(killedRow.state).to.equal('pending');
    expect(killedRow.signed_tx, 'the transaction was recorded before it was sent').to.match(/^0x02/);
    expect(await tokenBalance(chain, to)).to.equal(0n);
    await start();
    jwt = await signIn(user);
    const done = await eventually('the withdrawal completed after the restart', async () => {
      const row = (await get(`/wallet/withdrawals/${id}`)) as Record<string, string>;
      return row.status === 'completed' ? row : undefined;
    });
    expect(done.transactionHash, 'the recorded transaction, sent again').to.equal(
      keccak256(killedRow.signed_tx!),
    );
    expect(await tokenBalance(chain, to)).to.equal(3n * USD);
    expect(proxy.transactionsSent() - sent).to.equal(2); // the cut one, then the same again
    await expectAgreement();
  });

  it('killed after the transfer reached the chain, before its answer: the restart records it, no second transfer', async () => {
    const to = privateKeyToAccount(generatePrivateKey()).address;
    let killed: Promise<void> | undefined;
    proxy.intercept = (methods) => {
      if (!sendsTransaction(methods)) return 'forward';
      killed ??= kill();
      return killed.then(() => 'lose-answer' as const);
    };
    const res = await withdraw(2n * USD, to, 'crash-2');
    expect(res.status).to.equal(202);
    const { id } = (await res.json()) as { id: string };
    await eventually('the kill', async () => killed !== undefined);
    await killed;
    await eventually('the transfer on chain', async () => (await tokenBalance(chain, to)) === 2n * USD);
    proxy.intercept = undefined;
    expect((await rowOf(id))!.state).to.equal('pending');
    const sent = proxy.transactionsSent();
    await start();
    jwt = await signIn(user);
    const done = await eventually('the withdrawal found at start-up', async () => {
      const row = (await get(`/wallet/withdrawals/${id}`)) as Record<string, string>;
      return row.status === 'completed' ? row : undefined;
    });
    expect(done.transactionHash).to.match(/^0x[0-9a-f]{64}$/);
    expect(proxy.transactionsSent(), 'no second transaction').to.equal(sent);
    expect(await tokenBalance(chain, to)).to.equal(2n * USD);
    await expectAgreement();
    expect((await balance()).withdrawn).to.equal(String(5n * USD));
  });
});
