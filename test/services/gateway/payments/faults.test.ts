import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { privateKeyToAccount, generatePrivateKey } from 'viem/accounts';
import type { Address, LocalAccount } from 'viem';
import type { Database } from '../../../../core/db/database.ts';
import {
  chainClients,
  randomNonce,
  sigilDollarAbi,
  signTransfer,
  splitSignature,
  tokenDomain,
} from '../../../solidity/support.ts';
import type { DevChain } from '../../../support/chain.ts';
import { startSigil } from '../../../support/cli.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { textOf } from '../support.ts';
import {
  anvilWorld,
  balances,
  craftPayment,
  devAccountKey,
  eventually,
  expectBooksBalanced,
  fundedPayer,
  gatewayBehindProxy,
  payingClient,
  railPlugin,
  recordsOf,
  RpcProxy,
  sendsTransaction,
  settlementRows,
  stopSharedProbeWorld,
  walletTokenFor,
  type ProxyDecision,
  type SettlementRecord,
} from './support.ts';

/** `payer` moves `value` to `to` with an EIP-3009 authorization that the operator submits (payers hold no ether). */
async function spendWithAuthorization(chain: DevChain, payer: LocalAccount, to: Address, value: bigint) {
  const { publicClient, operatorWallet } = chainClients(chain);
  const now = BigInt(Math.floor(Date.now() / 1000));
  const authorization = {
    from: payer.address,
    to,
    value,
    validAfter: 0n,
    validBefore: now + 600n,
    nonce: randomNonce(),
  };
  const { v, r, s } = splitSignature(await signTransfer(payer, authorization, tokenDomain(chain)));
  const hash = await operatorWallet.writeContract({
    address: chain.token.address,
    abi: sigilDollarAbi,
    functionName: 'transferWithAuthorization',
    args: [
      authorization.from,
      authorization.to,
      authorization.value,
      authorization.validAfter,
      authorization.validBefore,
      authorization.nonce,
      v,
      r,
      s,
    ],
  });
  expect((await publicClient.waitForTransactionReceipt({ hash })).status).to.equal('success');
}

/** The reason x402 puts in a refusal's PaymentRequired (PAYMENT-REQUIRED header). */
const refusalReason = (res: Response): string | undefined =>
  decodePaymentRequiredHeader(res.headers.get('payment-required') as string).error;

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/** Faults on the real chain (anvil): every test ends with the records, the chain and the reconciler agreeing. */
describe('payments: faults on anvil', function () {
  this.timeout(120_000);
  const anvil = anvilWorld();

  describeEachDatabase('one gateway', (database) => {
    /** The gateway's clock: real time, moved forward by `offset` when a test needs time to pass. */
    const clock = { offset: 0, now: () => new Date(Date.now() + clock.offset) };
    const setup = gatewayBehindProxy(anvil, database, { clock });

    const payFor = (
      required: PaymentRequired,
      payer: LocalAccount = setup.gateway.payer,
    ): Promise<PaymentPayload> => payingClient(anvil.chain, payer).createPaymentPayload(required);
    const rows = () => settlementRows(setup.gateway.records);
    const rowOf = async (payment: PaymentPayload): Promise<SettlementRecord | undefined> => {
      const { from, nonce } = (payment.payload as { authorization: { from: string; nonce: string } })
        .authorization;
      return (await rows()).find((row) => row.id.endsWith(`:${from}:${nonce}`.toLowerCase()));
    };

    it('the same payment sent 20 times at once runs once: one 200, nineteen 402, one transfer', async () => {
      const payment = await payFor(await setup.gateway.required('instance'));
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => setup.gateway.callRest('instance', {}, payment)),
      );
      const statuses = answers.map((res) => res.status).sort();
      expect(statuses).to.deep.equal([200, ...Array<number>(19).fill(402)]);
      for (const res of answers.filter((res) => res.status === 402)) {
        expect(refusalReason(res)).to.be.oneOf([
          'payment_already_used',
          'invalid_exact_evm_nonce_already_used',
        ]);
      }
      const paid = answers.find((res) => res.status === 200)!;
      expect(decodePaymentResponseHeader(paid.headers.get('payment-response') as string).success).to.equal(
        true,
      );
      const { settled, rows } = await setup.gateway.expectBalanced();
      expect(settled).to.equal(500n);
      expect(rows).to.have.length(1);
    });

    it('the RPC down from the settlement on, then back: a pending receipt, settling, the worker settles once', async () => {
      const payment = await payFor(await setup.gateway.required('sleep'));
      // The chain becomes unreachable once the payment is verified, as the settlement is sent. (Cut
      // when the record reads `executing`, the RPC could still owe verification its answer: the
      // reservation is written while the payment is verified, and a slow machine then refused it.)
      setup.proxy.intercept = (methods) => {
        if (sendsTransaction(methods)) setup.proxy.down = true;
        return 'forward';
      };
      const res = await setup.gateway.callRest('sleep', { ms: 800 }, payment);
      expect(res.status).to.equal(200);
      expect(textOf(await res.json())).to.equal('slept 800');
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
      expect(receipt).to.include({ success: false, errorReason: 'settlement_pending' });
      const pending = (await rowOf(payment))!;
      expect(pending.state).to.equal('settling');
      expect(await balances(anvil.chain)(setup.gateway.payTo)).to.equal(500n);
      setup.proxy.intercept = undefined;
      setup.proxy.down = false;
      const settled = await eventually('the retried settlement', async () => {
        const row = await rowOf(payment);
        return row?.state === 'settled' ? row : undefined;
      });
      expect(settled.transaction).to.match(/^0x[0-9a-f]{64}$/);
      expect((await setup.gateway.expectBalanced()).settled).to.equal(1000n);
    });

    it('only eth_sendRawTransaction refused (the rest of the RPC up): settling, then settled once it is back', async () => {
      const payment = await payFor(await setup.gateway.required('echo'));
      setup.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'cut' : 'forward');
      const res = await setup.gateway.callRest('echo', { message: 'send refused' }, payment);
      expect(res.status, JSON.stringify(await res.clone().json())).to.equal(200);
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
      expect(receipt).to.include({ success: false, errorReason: 'settlement_pending' });
      expect((await rowOf(payment))!.state).to.equal('settling');
      setup.proxy.intercept = undefined;
      await eventually('the retried settlement', async () => (await rowOf(payment))?.state === 'settled');
      expect((await setup.gateway.expectBalanced()).settled).to.equal(1500n);
    });

    it('writes the reservation while the payment is verified, and drops it when verification fails: no record', async () => {
      const unfunded = await fundedPayer(anvil.chain, 0n);
      const payment = await payFor(await setup.gateway.required('echo'), unfunded);
      let release = () => {};
      const simulation = new Promise<void>((resolve) => (release = resolve));
      // The transfer's simulation (eth_call) is held: the verification waits on it, the reservation does not.
      setup.proxy.intercept = async (methods) => {
        if (methods.includes('eth_call')) await simulation;
        return 'forward' as const;
      };
      const call = setup.gateway.callRest('echo', { message: 'unfunded' }, payment);
      await eventually(
        'the reservation during verification',
        async () => (await rowOf(payment))?.state === 'executing',
      );
      release();
      const res = await call;
      expect(res.status).to.equal(402);
      expect(refusalReason(res)).to.match(/insufficient/);
      expect(await rowOf(payment)).to.equal(undefined);
      await setup.gateway.expectBalanced();
    });

    it('refuses, with a reason and before anything runs, an expired authorization, a wrong amount or payee, and an unfunded payer', async () => {
      const required = await setup.gateway.required('instance');
      const stranger = privateKeyToAccount(generatePrivateKey()).address;
      const now = BigInt(Math.floor(Date.now() / 1000));
      const unfunded = privateKeyToAccount(generatePrivateKey());
      const cases: [string, Promise<PaymentPayload>, RegExp][] = [
        [
          'expired',
          craftPayment(anvil.chain, required, setup.gateway.payer, {
            authorization: { validAfter: now - 3600n, validBefore: now - 60n },
          }),
          /valid_before/,
        ],
        [
          'accepted amount 400',
          craftPayment(anvil.chain, required, setup.gateway.payer, { accepted: { amount: '400' } }),
          /^requirements_mismatch$/,
        ],
        [
          'authorized value 400',
          craftPayment(anvil.chain, required, setup.gateway.payer, { authorization: { value: 400n } }),
          /value_mismatch/,
        ],
        [
          'accepted payTo a stranger',
          craftPayment(anvil.chain, required, setup.gateway.payer, { accepted: { payTo: stranger } }),
          /^requirements_mismatch$/,
        ],
        [
          'authorized to a stranger',
          craftPayment(anvil.chain, required, setup.gateway.payer, { authorization: { to: stranger } }),
          /recipient_mismatch/,
        ],
        ['unfunded payer', payFor(required, unfunded), /insufficient_balance/],
      ];
      for (const [name, crafted, reason] of cases) {
        const res = await setup.gateway.callRest('instance', {}, await crafted);
        expect(res.status, name).to.equal(402);
        expect(refusalReason(res), name).to.match(reason);
        const body = (await res.json()) as { code: string; message: string };
        expect(body.code, name).to.equal('payment_required');
        expect(body.message, name).to.match(/^Payment refused/);
      }
      // Nothing was reserved, nothing ran to be settled, nothing moved.
      const { settled, rows } = await setup.gateway.expectBalanced([
        { address: unfunded.address, before: 0n },
      ]);
      expect(settled).to.equal(1500n);
      expect(rows.filter((row) => row.state !== 'settled')).to.deep.equal([]);
    });

    it('a tool that fails is not charged: isError, no PAYMENT-RESPONSE, released, no transfer', async () => {
      const payment = await payFor(await setup.gateway.required('fail'));
      const res = await setup.gateway.callRest('fail', {}, payment);
      expect(res.status).to.equal(200);
      const result = (await res.json()) as { isError?: boolean };
      expect(result.isError).to.equal(true);
      expect(res.headers.get('payment-response')).to.equal(null);
      const row = (await rowOf(payment))!;
      expect(row.state).to.equal('released');
      expect(row.transaction).to.equal(null);
      expect((await setup.gateway.expectBalanced()).settled).to.equal(1500n);
    });

    it('the client hangs up during the call: the call is stopped, released, not charged', async () => {
      const payment = await payFor(await setup.gateway.required('sleep'));
      const aborter = new AbortController();
      const call = fetch(`${setup.gateway.url}/api/servers/probe/tools/sleep`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'payment-signature': Buffer.from(JSON.stringify(payment)).toString('base64'),
        },
        body: JSON.stringify({ arguments: { ms: 1000 } }),
        signal: aborter.signal,
      }).catch((err: Error) => err.name);
      await eventually('the reservation', async () => (await rowOf(payment))?.state === 'executing');
      aborter.abort();
      expect(await call).to.equal('AbortError');
      const row = await eventually('the release', async () => {
        const found = await rowOf(payment);
        return found?.state === 'released' ? found : undefined;
      });
      expect(row.transaction).to.equal(null);
      await new Promise((resolve) => setTimeout(resolve, 1000)); // past the sleep: still nothing moves
      expect((await rowOf(payment))!.state).to.equal('released');
      expect((await setup.gateway.expectBalanced()).settled).to.equal(1500n);
    });

    it('oversized arguments (> 100 KB) are refused with 413 before verification: no record; the payment then works', async () => {
      const payment = await payFor(await setup.gateway.required('echo'));
      const verifications = setup.proxy.count('eth_call');
      const tooBig = await setup.gateway.callRest('echo', { message: 'x'.repeat(110 * 1024) }, payment);
      expect(tooBig.status).to.equal(413);
      expect(((await tooBig.json()) as { code: string }).code).to.equal('payload_too_large');
      expect(setup.proxy.count('eth_call'), 'no simulation: the facilitator was not asked').to.equal(
        verifications,
      );
      expect(await rowOf(payment)).to.equal(undefined);
      const res = await setup.gateway.callRest('echo', { message: 'fits' }, payment);
      expect(res.status).to.equal(200);
      await eventually('the settled mark', async () => (await rowOf(payment))?.state === 'settled');
      expect((await setup.gateway.expectBalanced()).settled).to.equal(2000n);
    });

    it('replayed after success: 402, the tool does not run again, no second transfer', async () => {
      const payment = await payFor(await setup.gateway.required('instance'));
      expect((await setup.gateway.callRest('instance', {}, payment)).status).to.equal(200);
      const replay = await setup.gateway.callRest('instance', {}, payment);
      expect(replay.status).to.equal(402);
      expect(refusalReason(replay)).to.be.oneOf([
        'payment_already_used',
        'invalid_exact_evm_nonce_already_used',
      ]);
      expect(replay.headers.get('payment-response')).to.equal(null);
      expect((await setup.gateway.expectBalanced()).settled).to.equal(2500n);
    });

    it("the payer's balance gone during the call: the settlement is refused, the result withheld (402), the record failed", async () => {
      const payer = await fundedPayer(anvil.chain, 500n);
      const payment = await payFor(await setup.gateway.required('sleep'), payer);
      const call = setup.gateway.callRest('sleep', { ms: 1000 }, payment);
      await eventually('the reservation', async () => (await rowOf(payment))?.state === 'executing');
      // Meanwhile the payer spends everything with another authorization, submitted by someone else.
      const sink = privateKeyToAccount(generatePrivateKey()).address;
      await spendWithAuthorization(anvil.chain, payer, sink, 500n);
      const res = await call;
      expect(res.status).to.equal(402);
      expect(refusalReason(res)).to.equal('invalid_exact_evm_insufficient_balance');
      expect(((await res.json()) as { message: string }).message).to.match(/result is withheld/);
      const row = (await rowOf(payment))!;
      expect([row.state, row.transaction]).to.deep.equal(['failed', null]);
      expect(await balances(anvil.chain)(sink)).to.equal(500n);
      expect((await setup.gateway.expectBalanced()).settled).to.equal(2500n);
    });

    it('an authorization that would lapse before the call could finish is refused before it runs', async () => {
      const required = await setup.gateway.required('sleep');
      const now = BigInt(Math.floor(Date.now() / 1000));
      // Valid for x402's verification (it wants 6 s left), but shorter than a call may take (timeout + 10 s).
      const payment = await craftPayment(anvil.chain, required, setup.gateway.payer, {
        authorization: { validBefore: now + 30n },
      });
      const res = await setup.gateway.callRest('sleep', { ms: 3000 }, payment);
      expect(res.status).to.equal(402);
      expect(refusalReason(res)).to.equal('authorization_window_too_short');
      expect(await rowOf(payment)).to.equal(undefined);
      expect((await setup.gateway.expectBalanced()).settled).to.equal(2500n);
    });

    it('a call still running past staleAfterMs (slow start, then the call) is not released under it and is charged once', async () => {
      const payment = await payFor(await setup.gateway.required('sleep'));
      const call = setup.gateway.callRest('sleep', { ms: 2500 }, payment);
      await eventually('the reservation', async () => (await rowOf(payment))?.state === 'executing');
      // As if launching the server had taken most of the stale window: (10 s queue + 60 s timeout + 10 s) passes.
      clock.offset += 81_000;
      await new Promise((resolve) => setTimeout(resolve, 1500)); // the worker sweeps once a second
      const res = await call;
      // Back to real time: a gateway clock 81 s ahead would find every new authorization too short.
      clock.offset -= 81_000;
      expect(res.status).to.equal(200);
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
      expect(receipt.success).to.equal(true);
      // The records and the chain must agree, whichever way the gateway decides.
      await eventually('the settled mark', async () => (await rowOf(payment))?.state === 'settled');
      expect((await setup.gateway.expectBalanced()).settled).to.equal(3000n);
    });

    it('a record past staleAfterMs while its payment is still being verified is not released under the call', async () => {
      const payment = await payFor(await setup.gateway.required('echo'));
      // The verification's simulation held at the proxy: the record exists, the call has not run yet.
      let letThrough: () => void = () => undefined;
      const held = new Promise<ProxyDecision>((resolve) => (letThrough = () => resolve('forward')));
      setup.proxy.intercept = (methods) => (methods.includes('eth_call') ? held : 'forward');
      const call = setup.gateway.callRest('echo', { message: 'verified late' }, payment);
      await eventually('the reservation', async () => (await rowOf(payment))?.state === 'executing');
      clock.offset += 81_000;
      await new Promise((resolve) => setTimeout(resolve, 1500)); // the worker sweeps once a second
      expect((await rowOf(payment))?.state, 'not released by the sweep').to.equal('executing');
      clock.offset -= 81_000;
      setup.proxy.intercept = undefined;
      letThrough();
      const res = await call;
      expect(res.status).to.equal(200);
      await eventually('the settled mark', async () => (await rowOf(payment))?.state === 'settled');
      expect((await setup.gateway.expectBalanced()).settled).to.equal(3500n);
    });
  });

  describe('a gateway process killed mid-payment, then restarted on the same database (SQLite)', () => {
    let proxy: RpcProxy;
    let dir: string;
    let configFile: string;
    let payTo: Address;
    let operator: LocalAccount;
    let payer: LocalAccount;
    let payerBefore: bigint;
    let records: Database;
    let running: Awaited<ReturnType<typeof startSigil>> | undefined;
    let url: string;

    before(async () => {
      proxy = await RpcProxy.start(anvil.chain.rpcUrl);
      // Under the world's directory (not /tmp): the sandbox mounts a private /tmp.
      dir = join(anvil.world.dir, 'killed');
      mkdirSync(dir, { recursive: true });
      operator = privateKeyToAccount(generatePrivateKey());
      const rail = railPlugin(anvil.chain, {
        rpcUrl: proxy.url,
        facilitator: { kind: 'builtin', privateKey: devAccountKey(anvil.nextFacilitator()) },
      });
      payTo = rail.payTo;
      configFile = join(dir, 'sigil.config.json');
      writeFileSync(
        configFile,
        JSON.stringify({
          database: { url: join(dir, 'sigil.db') },
          log: { level: 'warn' },
          gateway: {
            port: 0,
            includeDefaultCatalog: false,
            catalogFile: anvil.world.catalogFile,
            warmupAtStart: false,
            // No wait for a process: staleAfterMs is then (12 s timeout + 10 s), well past a restart
            // on a loaded machine, so the record killed mid-call is still `executing` after one.
            toolCallTimeoutSeconds: 12,
            callLimits: { queueWaitSeconds: 0 },
            operatorWallets: [operator.address],
          },
          plugins: [
            { resolve: 'tee-none', enabled: true, options: {} },
            {
              resolve: 'registry-npm',
              enabled: true,
              options: {
                registry: anvil.world.registry.url,
                cacheDir: join(anvil.world.dir, 'packages'),
              },
            },
            {
              resolve: 'sandbox-linux-namespaces',
              enabled: true,
              options: { stateDir: join(dir, 'sandboxes') },
            },
            rail.plugin,
          ],
        }),
      );
      await start();
      records = await recordsOf(join(dir, 'sigil.db'));
      payer = await fundedPayer(anvil.chain);
      payerBefore = await balances(anvil.chain)(payer.address);
    });
    after(async () => {
      running?.child.kill('SIGKILL');
      await running?.exited;
      await records?.destroy();
      await proxy?.stop();
    });
    afterEach(() => {
      proxy.intercept = undefined;
    });

    async function start(): Promise<void> {
      running = await startSigil(['--config', configFile, 'gateway'], /gateway\s+http:\/\/\S+\n/, {
        env: { DATABASE_URL: join(dir, 'sigil.db'), LOG_LEVEL: 'warn' },
      });
      url = /gateway\s+(http:\/\/\S+)\n/.exec(running.output())![1]!;
    }
    async function kill(): Promise<void> {
      running!.child.kill('SIGKILL');
      expect(await running!.exited).to.equal(null);
      running = undefined;
    }
    const callSleep = (payment: PaymentPayload | undefined, ms: number) =>
      fetch(`${url}/api/servers/probe/tools/sleep`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(payment
            ? { 'payment-signature': Buffer.from(JSON.stringify(payment)).toString('base64') }
            : {}),
        },
        body: JSON.stringify({ arguments: { ms } }),
      });
    const required = async (): Promise<PaymentRequired> => {
      const res = await callSleep(undefined, 1);
      expect(res.status).to.equal(402);
      return decodePaymentRequiredHeader(res.headers.get('payment-required') as string);
    };
    const rowOf = async (payment: PaymentPayload): Promise<SettlementRecord | undefined> => {
      const { nonce } = (payment.payload as { authorization: { nonce: string } }).authorization;
      return (await settlementRows(records)).find((row) => row.id.endsWith(nonce.toLowerCase()));
    };
    /** What the payer fetches of a paid call whose answer it never got, signed in with its own wallet. */
    const paidResultText = async (id: string): Promise<string> => {
      const res = await fetch(`${url}/api/payments/${encodeURIComponent(id)}/result`, {
        headers: { authorization: `Bearer ${await walletTokenFor(url, payer)}` },
      });
      expect(res.status).to.equal(200);
      return textOf(((await res.json()) as { result: unknown }).result);
    };
    const expectBalanced = async () =>
      expectBooksBalanced({
        chain: anvil.chain,
        gatewayUrl: url,
        operatorToken: await walletTokenFor(url, operator),
        records,
        payTo,
        payers: [{ address: payer.address, before: payerBefore }],
      });

    it('killed between verification and settlement: the restart releases the call at once (its process is dead), never charged', async () => {
      const payment = await payingClient(anvil.chain, payer).createPaymentPayload(await required());
      const call = callSleep(payment, 1500).then(
        () => 'answered',
        () => 'connection lost',
      );
      await eventually('the reservation', async () => (await rowOf(payment))?.state === 'executing');
      await kill();
      expect(await call).to.equal('connection lost');
      await start();
      // Younger than staleAfterMs, but its process is gone: on one machine, a predecessor's.
      const released = (await rowOf(payment))!;
      expect(released.state).to.equal('released');
      expect(released.transaction).to.equal(null);
      expect(released.reason).to.match(/never finished/);
      expect(proxy.transactionsSent()).to.equal(0);
      expect((await expectBalanced()).settled).to.equal(0n);
    });

    it('killed as the settlement transaction is sent, before it reaches the chain: the restart settles it, once, and the payer fetches the result it paid for', async () => {
      const payment = await payingClient(anvil.chain, payer).createPaymentPayload(await required());
      let killed: Promise<void> | undefined;
      proxy.intercept = (methods) => {
        if (!sendsTransaction(methods)) return 'forward';
        killed ??= kill();
        return killed.then(() => 'cut' as const);
      };
      const answer = await callSleep(payment, 10).then(
        () => 'answered',
        () => 'connection lost',
      );
      expect(answer).to.equal('connection lost');
      await killed;
      proxy.intercept = undefined;
      expect((await rowOf(payment))!.state).to.equal('settling');
      expect(await balances(anvil.chain)(payTo)).to.equal(0n);
      await start();
      const settled = await eventually('the settlement completed at start-up', async () => {
        const row = await rowOf(payment);
        return row?.state === 'settled' ? row : undefined;
      });
      expect(settled.transaction).to.match(/^0x[0-9a-f]{64}$/);
      expect(await paidResultText(settled.id)).to.equal('slept 10');
      expect((await expectBalanced()).settled).to.equal(500n);
    });

    it('killed after the settlement transaction reached the chain, before its answer: the restart records it, no second transfer, and the payer fetches the result', async () => {
      const payment = await payingClient(anvil.chain, payer).createPaymentPayload(await required());
      let killed: Promise<void> | undefined;
      proxy.intercept = (methods) => {
        if (!sendsTransaction(methods)) return 'forward';
        killed ??= kill();
        // The transaction goes on to anvil (mined at once); the dead gateway never hears of it.
        return killed.then(() => 'lose-answer' as const);
      };
      const answer = await callSleep(payment, 10).then(
        () => 'answered',
        () => 'connection lost',
      );
      expect(answer).to.equal('connection lost');
      await killed;
      await eventually('the transfer on chain', async () => (await balances(anvil.chain)(payTo)) === 1000n);
      proxy.intercept = undefined;
      expect((await rowOf(payment))!.state).to.equal('settling');
      const sent = proxy.transactionsSent();
      await start();
      const settled = await eventually('the settlement found at start-up', async () => {
        const row = await rowOf(payment);
        return row?.state === 'settled' ? row : undefined;
      });
      expect(settled.transaction).to.match(/^0x[0-9a-f]{64}$/);
      expect(proxy.transactionsSent(), 'no second transaction').to.equal(sent);
      expect(await paidResultText(settled.id)).to.equal('slept 10');
      expect((await expectBalanced()).settled).to.equal(1000n);
    });
  });
});
