import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { decodePaymentResponseHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { expect } from 'chai';
import type { LocalAccount } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { DevChain } from '../../../support/chain.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { textOf } from '../support.ts';
import {
  anvilWorld,
  cancelAuthorization,
  eventually,
  fundedPayer,
  gatewayBehindProxy,
  payingClient,
  paidGateway,
  sendsTransaction,
  settlementRows,
  stopSharedProbeWorld,
  walletTokenFor,
  type PaidGateway,
  type SettlementRecord,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/** The id the x402-evm rail gives a payment: network, token, payer and nonce, lower case. */
const paymentIdOf = (chain: DevChain, payment: PaymentPayload): string => {
  const { from, nonce } = (payment.payload as { authorization: { from: string; nonce: string } })
    .authorization;
  return `eip155:${chain.chainId}:${chain.token.address}:${from}:${nonce}`.toLowerCase();
};

/**
 * A paid result whose answer never reached the payer (its connection gone, or the process dead, as
 * the settlement went out) is kept with the settlement: its payer, and only its payer, fetches it by
 * payment id for `gateway.paidResultRetentionHours`. (The process-kill case is in faults.test.ts.)
 */
describe('payments: a paid result fetched again by its payer (anvil)', function () {
  this.timeout(120_000);
  const anvil = anvilWorld();

  describeEachDatabase('one gateway', (database) => {
    /** The gateway's clock: real time, moved forward by `offset` when a test needs time to pass. */
    const clock = { offset: 0, now: () => new Date(Date.now() + clock.offset) };
    const setup = gatewayBehindProxy(anvil, database, { clock });
    let payerToken: string;

    before(async () => {
      payerToken = await walletTokenFor(setup.gateway.url, setup.gateway.payer);
    });

    const payFor = (required: PaymentRequired, payer: LocalAccount = setup.gateway.payer) =>
      payingClient(anvil.chain, payer).createPaymentPayload(required);
    const fetchResult = (id: string, token?: string) =>
      fetch(`${setup.gateway.url}/api/payments/${encodeURIComponent(id)}/result`, {
        headers: token ? { authorization: `Bearer ${token}` } : {},
      });
    const rowOf = async (id: string): Promise<(SettlementRecord & { result?: string | null }) | undefined> =>
      (await settlementRows(setup.gateway.records)).find((row) => row.id === id);

    /** A paid REST call whose client goes away as the settlement is sent: the answer never arrives. */
    async function lostAnswer(payment: PaymentPayload, message: string): Promise<void> {
      const aborter = new AbortController();
      setup.proxy.intercept = (methods) => {
        if (sendsTransaction(methods)) aborter.abort();
        return 'forward';
      };
      const outcome = await fetch(`${setup.gateway.url}/api/servers/probe/tools/echo`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'payment-signature': encodePaymentSignatureHeader(payment),
        },
        body: JSON.stringify({ arguments: { message } }),
        signal: aborter.signal,
      }).then(
        () => 'answered',
        (err: Error) => err.name,
      );
      expect(outcome).to.equal('AbortError');
      setup.proxy.intercept = undefined;
    }

    it('the answer lost as the settlement went out: the payer fetches the result it paid for by payment id; others 404, no token 401', async () => {
      const payment = await payFor(await setup.gateway.required('echo'));
      await lostAnswer(payment, 'lost on the way');
      const id = paymentIdOf(anvil.chain, payment);
      const settled = await eventually('the settled mark', async () => {
        const row = await rowOf(id);
        return row?.state === 'settled' ? row : undefined;
      });
      const res = await fetchResult(id, payerToken);
      expect(res.status).to.equal(200);
      const body = (await res.json()) as {
        paymentId: string;
        result: unknown;
        receipt: Record<string, unknown>;
      };
      expect(body.paymentId).to.equal(id);
      expect(textOf(body.result)).to.equal('lost on the way');
      expect((body.result as { _meta: Record<string, unknown> })._meta).to.have.property(
        'io.sigil/execution-proof',
      );
      expect(body.receipt).to.deep.include({ success: true, transaction: settled.transaction });
      expect(decodePaymentResponseHeader(res.headers.get('payment-response') as string)).to.include({
        success: true,
        transaction: settled.transaction,
      });

      const stranger = await walletTokenFor(setup.gateway.url, privateKeyToAccount(generatePrivateKey()));
      for (const [what, answer] of [
        ['another wallet', await fetchResult(id, stranger)],
        ['an unknown id', await fetchResult(`${id.slice(0, -4)}0000`, payerToken)],
        ['the operator', await fetchResult(id, setup.gateway.operatorToken)],
      ] as const) {
        expect(answer.status, what).to.equal(404);
        const refusal = (await answer.json()) as { code: string; message: string };
        expect(refusal.code, what).to.equal('not_found');
        expect(JSON.stringify(refusal), what).to.not.include('lost on the way');
      }
      const anonymous = await fetchResult(id);
      expect(anonymous.status).to.equal(401);
      expect(await anonymous.text()).to.not.include('lost on the way');
      expect((await setup.gateway.expectBalanced()).settled).to.equal(500n);
    });

    it('while the settlement is pending the payer gets 409; once the worker settles it, the result', async () => {
      const payment = await payFor(await setup.gateway.required('echo'));
      setup.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'cut' : 'forward');
      const res = await setup.gateway.callRest('echo', { message: 'pending' }, payment);
      expect(res.status).to.equal(200);
      const id = paymentIdOf(anvil.chain, payment);
      const pending = await fetchResult(id, payerToken);
      expect(pending.status).to.equal(409);
      expect(pending.headers.get('retry-after')).to.equal('2');
      expect(((await pending.json()) as { code: string }).code).to.equal('conflict');
      setup.proxy.intercept = undefined;
      await eventually('the retried settlement', async () => (await rowOf(id))?.state === 'settled');
      const fetched = await fetchResult(id, payerToken);
      expect(fetched.status).to.equal(200);
      expect(textOf(((await fetched.json()) as { result: unknown }).result)).to.equal('pending');
      expect((await setup.gateway.expectBalanced()).settled).to.equal(1000n);
    });

    it('a result never paid for is not kept: the authorization cancelled during the call, 402, then 404 for its payer', async () => {
      const payment = await payFor(await setup.gateway.required('sleep'));
      const id = paymentIdOf(anvil.chain, payment);
      const call = setup.gateway.callRest('sleep', { ms: 1500 }, payment);
      await eventually('the reservation', async () => (await rowOf(id))?.state === 'executing');
      await cancelAuthorization(anvil.chain, setup.gateway.payer, payment);
      expect((await call).status).to.equal(402);
      const row = (await rowOf(id))!;
      expect([row.state, row.result]).to.deep.equal(['failed', null]);
      expect((await fetchResult(id, payerToken)).status).to.equal(404);
      expect((await setup.gateway.expectBalanced()).settled).to.equal(1000n);
    });

    it("a malformed payment id is a 400 invalid_request, not a database lookup: too long, or outside a rail id's characters", async () => {
      const id = paymentIdOf(anvil.chain, await payFor(await setup.gateway.required('echo')));
      for (const [what, bad] of [
        ['too long', `${id}:${'0'.repeat(300)}`],
        ['a space', `${id} x`],
        ['markup', `<script>${id}`],
        ['a quote', `${id}'--`],
      ] as const) {
        const res = await fetchResult(bad, payerToken);
        expect(res.status, what).to.equal(400);
        const refusal = (await res.json()) as { code: string; details: { issues: { path: string }[] } };
        expect(refusal.code, what).to.equal('invalid_request');
        expect(refusal.details.issues[0]?.path, what).to.equal('params.paymentId');
      }
      // A well-formed id nothing is kept under is still the same 404 as before.
      expect((await fetchResult(id, payerToken)).status).to.equal(404);
    });

    it('kept for the retention only: a day later 404, and the worker deletes it from the database', async () => {
      const payment = await payFor(await setup.gateway.required('echo'));
      expect((await setup.gateway.callRest('echo', { message: 'a day' }, payment)).status).to.equal(200);
      const id = paymentIdOf(anvil.chain, payment);
      await eventually('the settled mark', async () => (await rowOf(id))?.state === 'settled');
      expect((await fetchResult(id, payerToken)).status).to.equal(200);
      expect((await rowOf(id))!.result).to.be.a('string');
      clock.offset += 24 * 3_600_000 + 1000;
      try {
        expect((await fetchResult(id, payerToken)).status).to.equal(404);
        const swept = await eventually('the sweep', async () => {
          const row = await rowOf(id);
          return row?.result === null ? row : undefined;
        });
        expect(swept.state).to.equal('settled');
      } finally {
        clock.offset -= 24 * 3_600_000 + 1000;
      }
      expect((await setup.gateway.expectBalanced()).settled).to.equal(1500n);
    });
  });

  /**
   * What a gateway keeps is bounded and, with a data key, sealed: results over
   * `gateway.paidResultMaxBytes` or past a payer's `gateway.paidResultMaxBytesPerPayer` are served
   * once and not kept (the receipt says so), and under `database.dataKey` the stored column is an
   * AES-256-GCM box, not the result.
   */
  describeEachDatabase('a gateway with result limits and a data key', (database) => {
    let gateway: PaidGateway;
    let payerToken: string;
    const dataKey = 'paid-results-test-data-key-0123456789abcdef';

    before(async () => {
      gateway = await paidGateway(anvil.world, anvil.chain, database, {
        facilitatorIndex: anvil.nextFacilitator(),
        gateway: { paidResultMaxBytes: 8_000, paidResultMaxBytesPerPayer: 10_000 },
        dataKey,
      });
      payerToken = await walletTokenFor(gateway.url, gateway.payer);
    });
    after(async () => {
      await gateway?.stop();
    });

    const storedResult = async (id: string): Promise<string | null | undefined> =>
      (await settlementRows(gateway.records)).find((row) => row.id === id)?.result;
    /** The kept-result columns of a record, which the settling mark writes together or not at all. */
    const keptColumns = async (id: string) => {
      const row = (await settlementRows(gateway.records)).find((record) => record.id === id) as
        | { result: string | null; result_bytes: number | null; result_expires_at: number | string | null }
        | undefined;
      return {
        kept: typeof row?.result === 'string',
        bytes: row?.result_bytes ?? null,
        expiresAt: row?.result_expires_at == null ? null : Number(row.result_expires_at),
      };
    };
    /** A paid echo of `message` by `payer`: its payment id and its receipt. */
    const paidEcho = async (payer: LocalAccount, message: string) => {
      const payment = await payingClient(anvil.chain, payer).createPaymentPayload(
        await gateway.required('echo'),
      );
      const res = await gateway.callRest('echo', { message }, payment);
      expect(res.status).to.equal(200);
      const id = paymentIdOf(anvil.chain, payment);
      await eventually('the settled mark', async () =>
        (await settlementRows(gateway.records)).some((row) => row.id === id && row.state === 'settled'),
      );
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
      return { id, receipt: receipt as typeof receipt & { extensions?: Record<string, unknown> } };
    };

    it('sealed under the data key: the stored column is not the result; its payer still fetches it', async () => {
      const marker = 'kept-but-sealed-marker';
      const { id, receipt } = await paidEcho(gateway.payer, marker);
      expect(receipt.extensions, 'kept: the receipt says nothing more').to.equal(undefined);
      const stored = await storedResult(id);
      expect(stored)
        .to.be.a('string')
        .and.match(/^aes-256-gcm:/);
      expect(stored).to.not.include(marker);
      expect(stored).to.not.include(Buffer.from(marker).toString('base64').slice(0, 12));
      const fetched = await fetch(`${gateway.url}/api/payments/${encodeURIComponent(id)}/result`, {
        headers: { authorization: `Bearer ${payerToken}` },
      });
      expect(fetched.status).to.equal(200);
      expect(textOf(((await fetched.json()) as { result: unknown }).result)).to.equal(marker);
    });

    it('a result over paidResultMaxBytes is served, not kept, and its receipt says so', async () => {
      const { id, receipt } = await paidEcho(gateway.payer, 'x'.repeat(9_000));
      expect(receipt.extensions?.['io.sigil/paid-result']).to.deep.equal({
        paymentId: id,
        kept: false,
        reason: 'result_too_large',
      });
      expect(await storedResult(id)).to.equal(null);
    });

    it("past paidResultMaxBytesPerPayer a payer's further results are not kept (another payer's are)", async () => {
      const busy = await fundedPayer(anvil.chain);
      const message = 'y'.repeat(3_000); // each result about 4.6 KB with its proof: two fit in 10 000 bytes
      const first = await paidEcho(busy, message);
      const second = await paidEcho(busy, message);
      const third = await paidEcho(busy, message);
      expect([first, second].map(({ receipt }) => receipt.extensions)).to.deep.equal([undefined, undefined]);
      const kept = await keptColumns(second.id);
      expect(kept.kept).to.equal(true);
      expect(kept.bytes).to.be.within(3_000, 5_000);
      expect(kept.expiresAt).to.be.above(Date.now());
      expect(third.receipt.extensions?.['io.sigil/paid-result']).to.deep.equal({
        paymentId: third.id,
        kept: false,
        reason: 'payer_quota_full',
      });
      expect(await keptColumns(third.id)).to.deep.equal({ kept: false, bytes: null, expiresAt: null });
      const other = await paidEcho(gateway.payer, message);
      expect(other.receipt.extensions).to.equal(undefined);
    });
  });
});
