import { z } from 'zod';
import type {
  PaymentRailV1,
  PaymentTerms,
  SettleOutcome,
  VerifiedPayment,
  VerifyOutcome,
  X402PaymentRequired,
} from '../index.ts';
import { ensure, expectShape, failWith, notApplicableBecause, pass } from './check.ts';
import { caip2, sameAddress, x402PaymentRequiredSchema, type X402Requirements } from './x402.ts';
import type { InstanceCheck, KitContext } from './kit.ts';
import { describeKitWithBehaviour } from './mocha.ts';
import { paymentRailKit } from './payment-rail.ts';

/**
 * Behaviour of `payment-rail` v1 (packages/plugin-api/src/contracts/payment-rail-v1.ts), checked with real money
 * on a real (test) chain: a rail can only be judged by what moves. The checks need what only the
 * tester has, a funded payer and a client that signs payments for the rail's scheme, so they take a
 * harness. Each check runs on a fresh instance and pays for itself (at most one price per check).
 */

/** What only the tester has: a funded payer, a client that signs its payments, balances on the chain. */
export interface PaymentRailHarness {
  /** The address of the funded payer whose payments `pay` signs (as `verify` reports it). */
  payer: string;
  /**
   * Signs, as the payer, a payment (an x402 v2 `PaymentPayload`) for `required.accepts[0]` exactly as
   * given. The kit hands it terms it changed on purpose, which a real client would sign as they are:
   * a lower `amount`, another `payTo`, and a negative `maxTimeoutSeconds`, meaning an authorization
   * whose validity ended that many seconds ago. x402's clients do all of that already (for the
   * `exact` EVM scheme, `new x402Client().register(network, new ExactEvmScheme(account))` with spend
   * controls that allow the rail's asset, then `createPaymentPayload(required)`).
   */
  pay(required: X402PaymentRequired): Promise<unknown>;
  /** The asset's balance of `address` on the rail's chain, in base units. */
  balanceOf(address: string): Promise<bigint>;
  /**
   * Optional: cancels on chain, as the payer, the authorization of a payment `pay` signed, and resolves
   * once the cancellation is final (for EIP-3009, `cancelAuthorization` signed by the payer, mined).
   * Without it the check that a cancelled authorization never counts as settled is not applicable.
   */
  cancel?(payload: unknown): Promise<void>;
}

const CONTRACT = 'packages/plugin-api/src/contracts/payment-rail-v1.ts';
const spec = (detail: string) => `${CONTRACT}: ${detail}`;
type Context = KitContext & { instance: PaymentRailV1 };
type RailCheck = InstanceCheck<PaymentRailV1>;

const termsSchema = z.object({
  scheme: z.string().min(1),
  network: caip2,
  chainId: z.number().int().positive(),
  asset: z.object({
    address: z.string().min(1),
    name: z.string().min(1),
    version: z.string().min(1),
    decimals: z.number().int().min(0).max(77),
  }),
  pricePerCall: z.bigint().positive(),
  payTo: z.string().min(1),
  maxTimeoutSeconds: z.number().int().positive(),
  facilitator: z.enum(['builtin', 'remote']),
});

const verifiedSchema = z.object({
  valid: z.literal(true),
  payment: z.object({
    id: z.string().min(1),
    payer: z.string().min(1),
    amount: z.bigint(),
    validBefore: z.number().int(),
    authorization: z.record(z.string(), z.unknown()),
  }),
});

const refusedSchema = z.object({
  valid: z.literal(false),
  reason: z.string().min(1),
  message: z.string().min(1),
});

const RESOURCE = { url: 'mcp://tool/conformance__kit', description: 'A payment-rail conformance check' };

/** Evidence cannot hold bigints (reports are JSON): each becomes its decimal string. */
const plain = (value: unknown): unknown =>
  JSON.parse(
    JSON.stringify(value, (_key, inner: unknown) => (typeof inner === 'bigint' ? inner.toString() : inner)),
  );

/** What a payment is recorded as in evidence: never the authorization, which is spendable. */
const shown = (payment: VerifiedPayment) => ({
  id: payment.id,
  payer: payment.payer,
  amount: payment.amount.toString(),
  validBefore: payment.validBefore,
});

function termsOf({ instance, evidence }: Context): PaymentTerms {
  const terms = expectShape(termsSchema, instance.terms(), 'terms()');
  evidence.note('terms()', plain(terms));
  return terms;
}

/** The requirements the rail publishes, read back from its own `paymentRequired()`. */
function requirementsOf(context: Context): { required: X402PaymentRequired; accepted: X402Requirements } {
  const required = context.instance.paymentRequired(RESOURCE);
  const parsed = expectShape(x402PaymentRequiredSchema, required, 'paymentRequired()');
  return { required, accepted: parsed.accepts[0] as X402Requirements };
}

/** A payment signed by the harness for `changes` applied to the rail's own terms. */
async function payFor(
  context: Context,
  harness: PaymentRailHarness,
  changes: Partial<X402Requirements> = {},
): Promise<Record<string, unknown>> {
  const { required, accepted } = requirementsOf(context);
  const payload = await harness.pay({ ...required, accepts: [{ ...accepted, ...changes }] });
  ensure(typeof payload === 'object' && payload !== null, 'the harness returned no payment payload object');
  return payload as Record<string, unknown>;
}

/** The same payment claiming to accept the rail's own terms: what a client that lies would send. */
function claimingTerms(context: Context, payload: Record<string, unknown>): Record<string, unknown> {
  return { ...structuredClone(payload), accepted: requirementsOf(context).accepted };
}

async function verifyValid(context: Context, payload: unknown, what: string): Promise<VerifiedPayment> {
  const outcome: VerifyOutcome = await context.instance.verify(payload);
  context.evidence.note(
    `verify(${what})`,
    outcome.valid ? { valid: true, payment: shown(outcome.payment) } : plain(outcome),
  );
  if (!outcome.valid) failWith(`verify(${what}) refused it: ${outcome.reason}: ${outcome.message}`);
  expectShape(verifiedSchema, outcome, `verify(${what})`);
  return outcome.payment;
}

async function balancesOf(context: Context, harness: PaymentRailHarness) {
  const { payTo } = termsOf(context);
  const [payer, payee] = await Promise.all([harness.balanceOf(harness.payer), harness.balanceOf(payTo)]);
  return { payer, payee };
}

/** Fails unless the payer's and the payee's balances moved by exactly `by` (0 for nothing). */
async function expectMoved(
  context: Context,
  harness: PaymentRailHarness,
  before: { payer: bigint; payee: bigint },
  by: bigint,
  after: string,
): Promise<void> {
  const now = await balancesOf(context, harness);
  context.evidence.note(`balances after ${after}`, plain({ before, now }));
  const paid = before.payer - now.payer;
  const received = now.payee - before.payee;
  ensure(
    paid === by && received === by,
    `after ${after} the payer paid ${paid} and payTo received ${received} base units; expected ${by === 0n ? 'nothing to move' : `exactly ${by}`}`,
  );
}

/** A refusal by verify, with its reason, that moves nothing. */
async function expectRefused(
  context: Context,
  harness: PaymentRailHarness,
  payload: unknown,
  what: string,
): Promise<void> {
  const before = await balancesOf(context, harness);
  const outcome = await context.instance.verify(payload);
  context.evidence.note(
    `verify(${what})`,
    outcome.valid ? { valid: true, payment: shown(outcome.payment) } : plain(outcome),
  );
  ensure(!outcome.valid, `verify() accepted ${what}`);
  expectShape(refusedSchema, outcome, `verify(${what}): the refusal`);
  await expectMoved(context, harness, before, 0n, `verify(${what})`);
}

async function settleOnce(context: Context, payment: VerifiedPayment, what: string): Promise<SettleOutcome> {
  const outcome = await context.instance.settle(payment);
  context.evidence.note(`settle(${what})`, plain(outcome));
  return outcome;
}

type Settled = Extract<SettleOutcome, { status: 'settled' }>;

function expectSettled(outcome: SettleOutcome, what: string): Settled {
  if (outcome.status !== 'settled')
    failWith(`${what} answered ${outcome.status} (${outcome.reason}: ${outcome.message}), not settled`);
  return outcome;
}

/** A payment signed, verified and settled, with the balances from before it. */
async function settledPayment(context: Context, harness: PaymentRailHarness) {
  const before = await balancesOf(context, harness);
  const payload = await payFor(context, harness);
  const payment = await verifyValid(context, payload, 'a good payment');
  const outcome = expectSettled(await settleOnce(context, payment, 'a verified payment'), 'settle()');
  return { before, payload, payment, outcome };
}

/** The first string field named `signature` in the scheme's payload, with a path to it. */
function signatureIn(
  payload: Record<string, unknown>,
): { holder: Record<string, unknown>; key: string } | undefined {
  const walk = (
    node: unknown,
    depth: number,
  ): { holder: Record<string, unknown>; key: string } | undefined => {
    if (typeof node !== 'object' || node === null || depth > 4) return undefined;
    const record = node as Record<string, unknown>;
    if (typeof record.signature === 'string' && record.signature.length > 8)
      return { holder: record, key: 'signature' };
    for (const inner of Object.values(record)) {
      const found = walk(inner, depth + 1);
      if (found) return found;
    }
    return undefined;
  };
  return walk(payload.payload, 0);
}

/** One character of a hex or base64 string replaced by another of the same alphabet. */
function alterOneCharacter(value: string): string {
  const at = Math.floor(value.length / 3);
  const char = value[at] as string;
  const replacement = /[0-9]/.test(char) ? String((Number(char) + 1) % 10) : char === 'a' ? 'b' : 'a';
  return `${value.slice(0, at)}${replacement}${value.slice(at + 1)}`;
}

export function paymentRailBehaviour(harness: () => PaymentRailHarness): readonly RailCheck[] {
  return [
    {
      id: 'payment-rail.terms-base-units',
      level: 'MUST',
      title:
        'terms() states the price as a positive integer (bigint) of base units, with the asset and its decimals',
      spec: spec('PaymentTerms; "Amounts are integer base units of the asset"'),
      check: async (context) => {
        const terms = termsOf(context);
        const [namespace, reference] = terms.network.split(':');
        if (namespace === 'eip155') {
          ensure(
            String(terms.chainId) === reference,
            `terms() says network ${terms.network} but chainId ${terms.chainId}`,
          );
        }
        return pass();
      },
    },
    {
      id: 'payment-rail.payment-required-x402',
      level: 'MUST',
      title:
        'paymentRequired() is an x402 v2 PaymentRequired for the resource, carrying the terms as they are',
      spec: spec(
        'paymentRequired: "The x402 v2 `PaymentRequired` object for one paid use of `resource`, with an optional reason"',
      ),
      check: async (context) => {
        const terms = termsOf(context);
        const bare = expectShape(
          x402PaymentRequiredSchema,
          context.instance.paymentRequired(RESOURCE),
          'paymentRequired()',
        );
        const withReason = expectShape(
          x402PaymentRequiredSchema,
          context.instance.paymentRequired(RESOURCE, 'payment_required'),
          'paymentRequired(resource, "payment_required")',
        );
        context.evidence.note('paymentRequired()', bare);
        ensure(
          bare.resource.url === RESOURCE.url,
          `resource.url is ${bare.resource.url}, not ${RESOURCE.url}`,
        );
        ensure(bare.error === undefined, `paymentRequired() without a reason says error "${bare.error}"`);
        ensure(
          withReason.error === 'payment_required',
          `the reason given is not its error: ${String(withReason.error)}`,
        );
        const entry = bare.accepts.find((accepted) => accepted.scheme === terms.scheme);
        ensure(entry, `no accepts entry has the terms' scheme ${terms.scheme}`);
        const wrong = [
          entry.network === terms.network ? '' : `network ${entry.network} (terms: ${terms.network})`,
          entry.amount === terms.pricePerCall.toString()
            ? ''
            : `amount ${entry.amount} (terms: ${terms.pricePerCall})`,
          sameAddress(entry.asset, terms.asset.address)
            ? ''
            : `asset ${entry.asset} (terms: ${terms.asset.address})`,
          sameAddress(entry.payTo, terms.payTo) ? '' : `payTo ${entry.payTo} (terms: ${terms.payTo})`,
          entry.maxTimeoutSeconds === terms.maxTimeoutSeconds
            ? ''
            : `maxTimeoutSeconds ${entry.maxTimeoutSeconds} (terms: ${terms.maxTimeoutSeconds})`,
        ].filter((problem) => problem !== '');
        ensure(wrong.length === 0, `the ${terms.scheme} entry differs from terms(): ${wrong.join(', ')}`);
        return pass();
      },
    },
    {
      id: 'payment-rail.verify-valid',
      level: 'MUST',
      title: 'verify() accepts a good payment with a stable id, the payer and the price, and moves nothing',
      spec: spec(
        'verify: "Checks a client\'s payment … Never moves money"; VerifiedPayment.id "Unique per authorization"',
      ),
      check: async (context) => {
        const h = harness();
        const terms = termsOf(context);
        const before = await balancesOf(context, h);
        const payload = await payFor(context, h);
        const first = await verifyValid(context, payload, 'a good payment');
        const again = await verifyValid(context, structuredClone(payload), 'the same payment again');
        const other = await verifyValid(context, await payFor(context, h), 'another good payment');
        ensure(first.id === again.id, `the same payment got two ids: ${first.id} and ${again.id}`);
        ensure(first.id !== other.id, `two payments got the same id ${first.id}`);
        ensure(
          sameAddress(first.payer, h.payer),
          `verify() says the payer is ${first.payer}, not ${h.payer}`,
        );
        ensure(
          first.amount === terms.pricePerCall,
          `verify() says the amount is ${first.amount}, not ${terms.pricePerCall}`,
        );
        ensure(
          first.validBefore > Date.now() / 1000,
          `validBefore ${first.validBefore} is already past for a payment just signed`,
        );
        await expectMoved(context, h, before, 0n, 'three verifications');
        const status = await context.instance.status(first);
        context.evidence.note('status() of a verified, unsettled payment', status);
        ensure(!status.used, 'status() says a payment that was only verified is used');
        return pass();
      },
    },
    {
      id: 'payment-rail.peek-matches-verify',
      level: 'MUST',
      title:
        'peek(), where the rail has it, reads from a good payment what verify() returns, and nothing from junk',
      spec: spec(
        'peek: "the payment `verify` would return for this payload if it were valid, read from the payload alone … or undefined when it cannot be read"',
      ),
      check: async (context) => {
        const { peek } = context.instance;
        if (!peek) notApplicableBecause('the rail has no peek()');
        const h = harness();
        const before = await balancesOf(context, h);
        const payload = await payFor(context, h);
        const peeked = peek.call(context.instance, structuredClone(payload));
        const verified = await verifyValid(context, payload, 'a good payment');
        context.evidence.note('peek() of the good payment', plain(peeked));
        ensure(peeked !== undefined, 'peek() read nothing from a good payment');
        const differs = (['id', 'payer', 'amount', 'validBefore'] as const).filter(
          (field) => String(peeked[field]) !== String(verified[field]),
        );
        ensure(differs.length === 0, `peek() and verify() differ in ${differs.join(', ')}`);
        for (const junk of [undefined, null, 'payment', { x402Version: 2 }, []])
          ensure(
            peek.call(context.instance, junk) === undefined,
            `peek(${JSON.stringify(junk)}) read a payment`,
          );
        await expectMoved(context, h, before, 0n, 'peek() and a verification');
        return pass();
      },
    },
    {
      id: 'payment-rail.verify-refuses-amount',
      level: 'MUST',
      title:
        'verify() refuses a payment for less than the price, and one whose amount was changed after signing',
      spec: spec('verify: "signature, amount, payee …"; "never throws for a bad payment: it says why"'),
      check: async (context) => {
        const h = harness();
        const price = termsOf(context).pricePerCall;
        if (price < 2n)
          notApplicableBecause(`the price is ${price} base unit: there is no smaller positive amount`);
        const less = (price - 1n).toString();
        const underpaid = await payFor(context, h, { amount: less });
        await expectRefused(context, h, underpaid, `a payment signed for ${less}`);
        await expectRefused(
          context,
          h,
          claimingTerms(context, underpaid),
          `a payment signed for ${less} claiming the terms`,
        );
        const altered = claimingTerms(context, await payFor(context, h));
        const authorization = (altered.payload as { authorization?: Record<string, unknown> } | undefined)
          ?.authorization;
        if (typeof authorization?.value === 'string') {
          authorization.value = (price * 2n).toString();
          await expectRefused(
            context,
            h,
            altered,
            'a good payment whose signed amount was doubled afterwards',
          );
        } else {
          context.evidence.note('the payload has no payload.authorization.value to change after signing');
        }
        return pass();
      },
    },
    {
      id: 'payment-rail.verify-refuses-payee',
      level: 'MUST',
      title: 'verify() refuses a payment to another payTo',
      spec: spec('verify: "… payee …"'),
      check: async (context) => {
        const h = harness();
        const wrongPayee = await payFor(context, h, { payTo: h.payer });
        await expectRefused(context, h, wrongPayee, 'a payment to another address');
        await expectRefused(
          context,
          h,
          claimingTerms(context, wrongPayee),
          'a payment to another address claiming the terms',
        );
        return pass();
      },
    },
    {
      id: 'payment-rail.verify-refuses-expired',
      level: 'MUST',
      title: 'verify() refuses an authorization whose validity window is over',
      spec: spec('verify: "… validity window …"'),
      check: async (context) => {
        const h = harness();
        const expired = claimingTerms(context, await payFor(context, h, { maxTimeoutSeconds: -120 }));
        await expectRefused(context, h, expired, 'a payment whose validity ended 2 minutes ago');
        return pass();
      },
    },
    {
      id: 'payment-rail.verify-refuses-bad-signature',
      level: 'MUST',
      title: 'verify() refuses a payment with an altered signature, which leaves the authorization unused',
      spec: spec(
        'verify: "signature …"; status: "Whether the payment\'s authorization has been used on chain"',
      ),
      check: async (context) => {
        const h = harness();
        const payload = await payFor(context, h);
        const good = await verifyValid(context, payload, 'a good payment');
        const tampered = structuredClone(payload);
        const signature = signatureIn(tampered);
        if (!signature)
          notApplicableBecause('the payment carries no `signature` field in its payload to alter');
        signature.holder[signature.key] = alterOneCharacter(signature.holder[signature.key] as string);
        await expectRefused(
          context,
          h,
          tampered,
          'the good payment with one character of its signature changed',
        );
        const status = await context.instance.status(good);
        context.evidence.note('status() of the good payment after its altered copy was refused', status);
        ensure(!status.used, 'status() says the authorization is used after verify() refused a copy of it');
        return pass();
      },
    },
    {
      id: 'payment-rail.settle-exact-once',
      level: 'MUST',
      title: 'settle() of a verified payment moves exactly the price, from the payer to payTo',
      spec: spec('settle: "Moves the money for a verified payment"'),
      check: async (context) => {
        const h = harness();
        const terms = termsOf(context);
        const { before, payment, outcome } = await settledPayment(context, h);
        ensure(outcome.transaction !== '', 'settle() answered settled without a transaction');
        ensure(
          sameAddress(outcome.payer, payment.payer),
          `settle() names payer ${outcome.payer}, verify() ${payment.payer}`,
        );
        await expectMoved(context, h, before, terms.pricePerCall, 'settle()');
        return pass();
      },
    },
    {
      id: 'payment-rail.settle-idempotent',
      level: 'MUST',
      title:
        'settle() again for a settled payment answers settled and moves nothing more; verify() then refuses it',
      spec: spec(
        'settle: "For a payment already settled on chain it answers `settled` again … never charging twice"',
      ),
      check: async (context) => {
        const h = harness();
        const { payment, outcome } = await settledPayment(context, h);
        const afterFirst = await balancesOf(context, h);
        const second = expectSettled(
          await settleOnce(context, payment, 'the same payment again'),
          'the second settle()',
        );
        ensure(
          second.transaction === '' || second.transaction.toLowerCase() === outcome.transaction.toLowerCase(),
          `the second settle() names transaction ${second.transaction}, the first ${outcome.transaction}`,
        );
        await expectMoved(context, h, afterFirst, 0n, 'the second settle()');
        return pass();
      },
    },
    {
      id: 'payment-rail.send-ahead',
      level: 'MUST',
      title:
        'send(), where the rail has it and sends, gives the transaction that settle() then answers settled, the price moved once',
      spec: spec(
        'send: "`settle`, which for a payment sent here waits for that transaction and never sends a second transfer"',
      ),
      check: async (context) => {
        const { send } = context.instance;
        if (!send) notApplicableBecause('the rail has no send()');
        const h = harness();
        const before = await balancesOf(context, h);
        const payment = await verifyValid(context, await payFor(context, h), 'a good payment');
        context.instance.prepareSettlement?.(payment);
        const sent = await send.call(context.instance, payment);
        context.evidence.note('send(a verified payment)', sent ?? 'nothing sent');
        if (!sent) notApplicableBecause('send() sent nothing ahead: this rail answers after the receipt');
        const outcome = expectSettled(
          await settleOnce(context, payment, 'a payment sent ahead'),
          'settle() after send()',
        );
        ensure(
          outcome.transaction.toLowerCase() === sent.transaction.toLowerCase(),
          `settle() names transaction ${outcome.transaction}, send() ${sent.transaction}`,
        );
        await expectMoved(context, h, before, termsOf(context).pricePerCall, 'send() and settle()');
        return pass();
      },
    },
    {
      id: 'payment-rail.verify-refuses-used',
      level: 'MUST',
      title: 'verify() refuses a payment whose authorization was already settled, and moves nothing',
      spec: spec('verify: "… authorization unused"'),
      check: async (context) => {
        const h = harness();
        const { payload } = await settledPayment(context, h);
        await expectRefused(context, h, structuredClone(payload), 'the same payment after it was settled');
        return pass();
      },
    },
    {
      id: 'payment-rail.status-after-settle',
      level: 'MUST',
      title: 'status() says a settled payment is used, by the transaction settle() named',
      spec: spec(
        'status: "Whether the payment\'s authorization has been used on chain, and by which transaction"',
      ),
      check: async (context) => {
        const h = harness();
        const { payment, outcome } = await settledPayment(context, h);
        const status = await context.instance.status(payment);
        context.evidence.note('status() after settle()', status);
        ensure(status.used, 'status() says a settled payment is unused');
        if (status.transaction !== undefined) {
          ensure(
            status.transaction.toLowerCase() === outcome.transaction.toLowerCase(),
            `status() names transaction ${status.transaction}, settle() ${outcome.transaction}`,
          );
        }
        return pass();
      },
    },
    {
      id: 'payment-rail.cancelled-not-settled',
      level: 'MUST',
      title:
        'a payment whose authorization the payer cancelled after verify() is never settled: settle() rejects it, status() says unused, nothing moves',
      spec: spec(
        'settle: "an authorization used up any other way (cancelled by the payer, spent on another transfer) is never reported `settled`; it is `rejected`, not charged"; status: "a cancelled authorization is never reported used"',
      ),
      check: async (context) => {
        const h = harness();
        if (!h.cancel) notApplicableBecause('the harness cannot cancel an authorization');
        const before = await balancesOf(context, h);
        const payload = await payFor(context, h);
        const payment = await verifyValid(context, payload, 'a good payment');
        await h.cancel(payload);
        const outcome = await settleOnce(
          context,
          payment,
          'the payment after its authorization was cancelled',
        );
        ensure(
          outcome.status === 'rejected',
          `settle() of a cancelled authorization answered ${outcome.status}${outcome.status === 'settled' ? ` (transaction "${outcome.transaction}")` : ''}, not rejected`,
        );
        const status = await context.instance.status(payment);
        context.evidence.note('status() of the cancelled authorization', status);
        ensure(!status.used, 'status() says a cancelled authorization is used (settled)');
        await expectMoved(context, h, before, 0n, 'settle() of a cancelled authorization');
        return pass();
      },
    },
    {
      id: 'payment-rail.settlements-on-chain',
      level: 'MUST',
      title:
        'settlementsOnChain() lists a settled payment once, with its id, payer, amount and transaction, from its block on',
      spec: spec('settlementsOnChain: "Payments to `payTo` that the chain records from `fromBlock` on"'),
      check: async (context) => {
        const h = harness();
        const terms = termsOf(context);
        const { payment, outcome } = await settledPayment(context, h);
        const listed = (await context.instance.settlementsOnChain(0n)).filter(
          (entry) => entry.id === payment.id,
        );
        context.evidence.note('settlementsOnChain(0) entries for the payment', plain(listed));
        ensure(listed.length === 1, `settlementsOnChain(0) lists the settled payment ${listed.length} times`);
        const entry = listed[0] as (typeof listed)[number];
        ensure(
          entry.amount === terms.pricePerCall,
          `it lists amount ${entry.amount}, the price is ${terms.pricePerCall}`,
        );
        ensure(
          sameAddress(entry.payer, payment.payer),
          `it lists payer ${entry.payer}, verify() ${payment.payer}`,
        );
        ensure(
          entry.transaction.toLowerCase() === outcome.transaction.toLowerCase(),
          `it lists transaction ${entry.transaction}, settle() ${outcome.transaction}`,
        );
        const fromItsBlock = await context.instance.settlementsOnChain(entry.block);
        ensure(
          fromItsBlock.some((other) => other.id === payment.id),
          `settlementsOnChain(${entry.block}), from the payment's own block, leaves it out`,
        );
        // A second settlement gives a later block that exists (asking past the chain's head is not the point).
        const next = await settledPayment(context, h);
        const nextEntry = (await context.instance.settlementsOnChain(entry.block)).find(
          (other) => other.id === next.payment.id,
        );
        ensure(nextEntry, `settlementsOnChain(${entry.block}) leaves out a payment settled after it`);
        if (nextEntry.block > entry.block) {
          const later = await context.instance.settlementsOnChain(nextEntry.block);
          ensure(
            !later.some((other) => other.id === payment.id),
            `settlementsOnChain(${nextEntry.block}) lists a payment of block ${entry.block}`,
          );
        } else {
          context.evidence.note('both payments settled in one block: fromBlock could not be told apart');
        }
        return pass();
      },
    },
    {
      id: 'payment-rail.latest-block',
      level: 'MUST',
      title: 'latestBlock(), where the rail has it, is at or past the block of a settlement it lists',
      spec: spec('latestBlock: "the chain\'s newest block now"'),
      check: async (context) => {
        const { latestBlock } = context.instance;
        if (!latestBlock) notApplicableBecause('the rail has no latestBlock()');
        const { payment } = await settledPayment(context, harness());
        const entry = (await context.instance.settlementsOnChain(0n)).find(
          (other) => other.id === payment.id,
        );
        ensure(entry, 'settlementsOnChain(0) leaves out the settled payment');
        const latest = await latestBlock.call(context.instance);
        context.evidence.note(
          'latestBlock() and the settlement’s block',
          plain({ latest, block: entry.block }),
        );
        ensure(
          latest >= entry.block,
          `latestBlock() is ${latest}, before the settlement's block ${entry.block}`,
        );
        return pass();
      },
    },
  ];
}

/**
 * The payment-rail kit (shape and behaviour) as mocha tests, against instances from `load` (fresh and
 * started on each call) and the payer `harness` describes (read when a check runs, so a suite can
 * build it in a `before` hook, e.g. after starting a dev chain).
 */
export function describePaymentRailBehaviour(
  load: () => Promise<PaymentRailV1>,
  harness: () => PaymentRailHarness,
): void {
  describeKitWithBehaviour(paymentRailKit, paymentRailBehaviour(harness), load);
}
