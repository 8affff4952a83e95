import { expect } from 'chai';
import { privateKeyToAccount } from 'viem/accounts';
import type { PaymentRailV1 } from '@sigil/plugin-api';
import { SecretRegistry } from '../../core/log.ts';
import {
  contractChecks,
  describePaymentRailBehaviour,
  EvidenceRedactor,
  paymentRailBehaviour,
  paymentRailKit,
  runChecks,
  type CheckResult,
  type PaymentRailHarness,
} from '@sigil/plugin-api/kit';
import x402Evm from '../../plugins/payments/x402-evm/index.ts';
import { KitLeases } from '../../packages/plugin-api/src/kit/leases.ts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { quietLogger } from '../support/kernel.ts';
import {
  balances,
  cancelAuthorization,
  pay,
  payingClient,
  railPlugin,
} from '../services/gateway/payments/support.ts';
import { systemClock } from '../../core/clock.ts';

/**
 * The payment-rail kit with behaviour, run on payments-x402-evm on a fresh anvil: the way a rail's
 * author runs it (a harness that pays with x402's own client and reads balances on chain). Then the
 * same checks against rails broken on purpose, each caught by the check that is about it.
 */

let chain: DevChain | undefined;
let options: Record<string, unknown> | undefined;

const noDatabase = () => Promise.reject(new Error('the rail under test has no database'));

async function createRail(): Promise<PaymentRailV1> {
  if (!chain || !options) throw new Error('the dev chain is not started');
  const instance = await x402Evm.create({
    config: x402Evm.config.parse(options),
    // One process: its leases need no database (nothing is written fenced by them).
    deps: { secrets: new SecretRegistry(), clock: systemClock, leases: new KitLeases(noDatabase) },
    logger: quietLogger(),
  });
  return instance as PaymentRailV1;
}

function harness(): PaymentRailHarness {
  if (!chain) throw new Error('the dev chain is not started');
  const client = payingClient(chain);
  const balanceOf = balances(chain);
  return {
    payer: chain.accounts.payer.address,
    pay: (required) => pay(client, required as never),
    balanceOf: (address) => balanceOf(address as `0x${string}`),
    cancel: (payload) =>
      cancelAuthorization(chain!, privateKeyToAccount(chain!.accounts.payer.privateKey), payload as never),
  };
}

describe('payment-rail kit on payments-x402-evm (anvil)', function () {
  this.timeout(120_000);
  before(async () => {
    chain = await startDevChain();
    // Answering at the broadcast, so that send() sends and its check applies; settle() alone is as ever.
    options = railPlugin(chain, { answerAfter: 'broadcast' }).plugin.options as Record<string, unknown>;
  });
  after(async () => {
    await chain?.stop();
    chain = undefined;
  });

  describePaymentRailBehaviour(createRail, harness);

  describe('against rails broken on purpose', () => {
    /** The kit's results for a rail made by `break_` from a good one. */
    async function resultsFor(
      break_: (rail: PaymentRailV1) => PaymentRailV1,
      ids: readonly string[],
    ): Promise<Record<string, CheckResult>> {
      const kit = { ...paymentRailKit, behaviour: paymentRailBehaviour(harness) };
      const checks = contractChecks(kit, async () => break_(await createRail())).filter((check) =>
        ids.includes(check.id),
      );
      const results = await runChecks(checks, {
        redactor: new EvidenceRedactor(),
        timeoutMs: 30_000,
        contextFor: (evidence) => ({ evidence }),
      });
      return Object.fromEntries(results.map((result) => [result.id, result]));
    }

    /** A rail whose methods are the good one's, but for those given. */
    const patched =
      (changes: (rail: PaymentRailV1) => Partial<PaymentRailV1>) =>
      (rail: PaymentRailV1): PaymentRailV1 => {
        const overrides = changes(rail);
        return new Proxy(rail, {
          get: (target, key, receiver) =>
            key in overrides
              ? overrides[key as keyof PaymentRailV1]
              : (Reflect.get(target, key, receiver) as unknown),
        });
      };

    it('fails the refusal checks for a rail whose verify() trusts what the client says it accepted', async () => {
      // Verifies the payment against the terms the payment claims, not the rail's own.
      const trusting = patched((rail) => ({
        verify: async (payload) => {
          const outcome = await rail.verify(payload);
          if (outcome.valid) return outcome;
          const id = `trusted:${JSON.stringify((payload as { payload?: unknown }).payload).length}:${Math.random()}`;
          return {
            valid: true,
            payment: { id, payer: 'someone', amount: 0n, validBefore: 0, authorization: {} },
          };
        },
      }));
      const ids = [
        'payment-rail.verify-refuses-amount',
        'payment-rail.verify-refuses-payee',
        'payment-rail.verify-refuses-expired',
        'payment-rail.verify-refuses-bad-signature',
        'payment-rail.verify-refuses-used',
      ];
      const results = await resultsFor(trusting, ids);
      for (const id of ids) {
        expect(results[id], id).to.include({ status: 'fail' });
        expect(results[id]?.reason, id).to.match(/^verify\(\) accepted /);
      }
    });

    it('fails verify-valid for ids that change between verifications of one payment', async () => {
      let calls = 0;
      const unstable = patched((rail) => ({
        verify: async (payload) => {
          const outcome = await rail.verify(payload);
          calls += 1;
          return outcome.valid
            ? { valid: true, payment: { ...outcome.payment, id: `${outcome.payment.id}:${calls}` } }
            : outcome;
        },
      }));
      const results = await resultsFor(unstable, ['payment-rail.verify-valid']);
      expect(results['payment-rail.verify-valid']).to.include({ status: 'fail' });
      expect(results['payment-rail.verify-valid']?.reason).to.match(/^the same payment got two ids/);
    });

    it('fails send-ahead for a rail whose settle() after send() names another transaction; not applicable when it answers after the receipt', async () => {
      const elsewhere = patched((rail) => ({
        send: async (payment) => {
          const sent = await rail.send!(payment);
          return sent && { transaction: `0x${'ab'.repeat(32)}` };
        },
      }));
      const failed = await resultsFor(elsewhere, ['payment-rail.send-ahead']);
      expect(failed['payment-rail.send-ahead']).to.include({ status: 'fail' });
      expect(failed['payment-rail.send-ahead']?.reason).to.match(
        /^settle\(\) names transaction \S+, send\(\) \S+$/,
      );
      const broadcasting = options;
      options = { ...options, answerAfter: 'receipt' };
      try {
        const receiptFirst = await resultsFor((rail) => rail, ['payment-rail.send-ahead']);
        expect(receiptFirst['payment-rail.send-ahead']).to.deep.include({
          status: 'not-applicable',
          reason: 'send() sent nothing ahead: this rail answers after the receipt',
        });
      } finally {
        options = broadcasting;
      }
    });

    it('fails settle-idempotent for a rail that refuses to settle a settled payment again', async () => {
      const settledOnce = new Set<string>();
      const forgetful = patched((rail) => ({
        settle: async (payment) => {
          if (settledOnce.has(payment.id))
            return { status: 'rejected', reason: 'nonce_already_used', message: 'used' };
          settledOnce.add(payment.id);
          return rail.settle(payment);
        },
      }));
      const results = await resultsFor(forgetful, ['payment-rail.settle-idempotent']);
      expect(results['payment-rail.settle-idempotent']).to.include({ status: 'fail' });
      expect(results['payment-rail.settle-idempotent']?.reason).to.match(
        /^the second settle\(\) answered rejected/,
      );
    });

    it('fails status-after-settle and settlements-on-chain for a rail that does not see the chain', async () => {
      const blind = patched(() => ({
        status: async () => ({ used: false }),
        settlementsOnChain: async () => [],
      }));
      const results = await resultsFor(blind, [
        'payment-rail.status-after-settle',
        'payment-rail.settlements-on-chain',
      ]);
      expect(results['payment-rail.status-after-settle']?.reason).to.equal(
        'status() says a settled payment is unused',
      );
      expect(results['payment-rail.settlements-on-chain']?.reason).to.equal(
        'settlementsOnChain(0) lists the settled payment 0 times',
      );
    });

    it('fails cancelled-not-settled for a rail that takes a used nonce for a settlement (the cancelled authorization served as paid)', async () => {
      // What the x402-evm rail did before: any used nonce read as settled, with no transaction.
      const nonceTrusting = patched((rail) => ({
        settle: async (payment) => {
          const outcome = await rail.settle(payment);
          return outcome.status === 'rejected' && outcome.reason === 'authorization_canceled'
            ? { status: 'settled', transaction: '', payer: payment.payer }
            : outcome;
        },
        status: async (payment) => {
          const status = await rail.status(payment);
          return status.used || status.spent ? { used: true } : status;
        },
      }));
      const results = await resultsFor(nonceTrusting, ['payment-rail.cancelled-not-settled']);
      expect(results['payment-rail.cancelled-not-settled']?.reason).to.equal(
        'settle() of a cancelled authorization answered settled (transaction "") , not rejected'.replace(
          ' ,',
          ',',
        ),
      );
    });

    it('fails latest-block for a rail whose newest block is behind its own settlements, and skips a rail without one', async () => {
      const stale = patched(() => ({ latestBlock: async () => 0n }));
      const results = await resultsFor(stale, ['payment-rail.latest-block']);
      expect(results['payment-rail.latest-block']?.reason).to.match(
        /^latestBlock\(\) is 0, before the settlement's block \d+$/,
      );
      const without = patched(() => ({ latestBlock: undefined }));
      expect(
        (await resultsFor(without, ['payment-rail.latest-block']))['payment-rail.latest-block'],
      ).to.include({
        status: 'not-applicable',
      });
    });

    it('fails payment-required-x402 and verify-valid for a rail that publishes another price than it takes', async () => {
      const dearer = patched((rail) => ({
        paymentRequired: (resource, error) => {
          const required = rail.paymentRequired(resource, error);
          return { ...required, accepts: required.accepts.map((entry) => ({ ...entry, amount: '600' })) };
        },
      }));
      const results = await resultsFor(dearer, [
        'payment-rail.payment-required-x402',
        'payment-rail.verify-valid',
      ]);
      expect(results['payment-rail.payment-required-x402']?.reason).to.match(
        /differs from terms\(\): amount 600 \(terms: 500\)/,
      );
      expect(results['payment-rail.verify-valid']?.reason).to.match(/^verify\(a good payment\) refused it/);
    });
  });
});
