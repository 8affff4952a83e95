import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import type { FacilitatorClient } from '@x402/core/server';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { createPublicClient, defineChain, getAddress, http, type Address, type LocalAccount } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { configSchema, X402EvmRail } from '../../../../plugins/payments/x402-evm/index.ts';
import { createFacilitator, validOnChain } from '../../../../plugins/payments/x402-evm/facilitator.ts';
import { devChainDefinition } from '../../../../devchain/index.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import {
  balances,
  chainBehindProxy,
  craftPayment,
  devAccountKey,
  fundedPayer,
  payingClient,
  railPlugin,
} from '../../../services/gateway/payments/support.ts';
import { ManualClock, systemClock } from '../../../../core/clock.ts';

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => resolve(body));
  });

/** A facilitator as a remote one looks on the wire (x402's /verify, /settle, /supported), counting its calls. */
async function serveFacilitator(
  facilitator: FacilitatorClient,
): Promise<{ url: string; calls: string[]; server: Server }> {
  const calls: string[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      calls.push(`${req.method} ${req.url}`);
      if (req.method === 'GET' && req.url?.endsWith('/supported'))
        return send(200, await facilitator.getSupported());
      const body = JSON.parse(await readBody(req)) as { paymentPayload: never; paymentRequirements: never };
      if (req.url?.endsWith('/verify')) {
        const verified = await facilitator.verify(body.paymentPayload, body.paymentRequirements);
        return send(verified.isValid ? 200 : 400, verified);
      }
      if (req.url?.endsWith('/settle'))
        return send(200, await facilitator.settle(body.paymentPayload, body.paymentRequirements));
      send(404, {});
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/x402`, calls, server };
}

describe('payments: facilitators', function () {
  this.timeout(60_000);
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain();
  });
  after(() => chain?.stop());

  it('refuses a remote facilitator without a URL: x402’s public default is never used', () => {
    const { plugin } = railPlugin(chain);
    for (const facilitator of [
      { kind: 'remote' },
      { kind: 'remote', url: '' },
      { kind: 'remote', url: 'ftp://x' },
    ]) {
      const parsed = configSchema.safeParse({ ...plugin.options, facilitator });
      expect(parsed.success, JSON.stringify(facilitator)).to.equal(false);
    }
  });

  it('takes the built-in facilitator’s account as privateKey or several as privateKeys, never both, none, or one twice', () => {
    const { plugin } = railPlugin(chain);
    const [one, two] = [devAccountKey(5), devAccountKey(6)];
    const parse = (accounts: Record<string, unknown>) =>
      configSchema.safeParse({ ...plugin.options, facilitator: { kind: 'builtin', ...accounts } });
    for (const accounts of [{ privateKey: one }, { privateKeys: [one, two], accountLeaseSeconds: 5 }]) {
      expect(parse(accounts).success, JSON.stringify(accounts)).to.equal(true);
    }
    for (const accounts of [
      {},
      { privateKey: one, privateKeys: [two] },
      { privateKeys: [] },
      { privateKeys: [one, one.toUpperCase().replace('0X', '0x')] },
      { privateKey: one, accountLeaseSeconds: 2 },
    ]) {
      expect(parse(accounts).success, JSON.stringify(accounts)).to.equal(false);
    }
  });

  it('verifies and settles through a remote facilitator at the configured URL; a refusal there is a reason, not a crash', async () => {
    const { plugin, payTo } = railPlugin(chain);
    const builtin = configSchema.parse(plugin.options);
    const definition = defineChain({
      id: chain.chainId,
      name: 'dev',
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [chain.rpcUrl] } },
    });
    const remote = await serveFacilitator(
      createFacilitator(
        builtin,
        definition,
        createPublicClient({ chain: definition, transport: http(chain.rpcUrl) }),
        systemClock,
      ),
    );
    try {
      const rail = new X402EvmRail(
        configSchema.parse({ ...plugin.options, facilitator: { kind: 'remote', url: remote.url } }),
        { clock: systemClock },
      );
      expect(rail.terms().facilitator).to.equal('remote');
      const payload = await payingClient(chain).createPaymentPayload(
        rail.paymentRequired({ url: 'mcp://tool/probe__echo', description: 'echo' }) as never,
      );
      const balanceOf = balances(chain);
      const verified = await rail.verify(payload);
      expect(verified.valid).to.equal(true);
      if (!verified.valid) return;
      const settled = await rail.settle(verified.payment);
      expect(settled.status, JSON.stringify(settled)).to.equal('settled');
      expect(await balanceOf(payTo)).to.equal(500n);
      expect(remote.calls).to.include.members(['POST /x402/verify', 'POST /x402/settle']);

      const replay = await rail.verify(payload);
      expect(replay).to.deep.include({ valid: false, reason: 'payment_already_used' });
      // Settling again answers settled (the chain has it), moving nothing more.
      expect((await rail.settle(verified.payment)).status).to.equal('settled');
      expect(await balanceOf(payTo)).to.equal(500n);
      await rail.stop();
    } finally {
      remote.server.close();
    }
  });

  it('by the rail’s clock, a failed settlement is tried again while the authorization leaves x402’s 6 s to settle, and refused as expired from then on', async () => {
    const { plugin } = railPlugin(chain);
    const clock = new ManualClock();
    // A facilitator that accepts every payment and never settles one (as one whose node is down).
    const failing: FacilitatorClient = {
      verify: async (payload) => ({
        isValid: true,
        payer: (payload.payload as { authorization: { from: string } }).authorization.from,
      }),
      settle: async (_payload, requirements) => ({
        success: false,
        errorReason: 'unexpected_settle_error',
        transaction: '',
        network: requirements.network,
      }),
      getSupported: async () => ({ kinds: [], extensions: [], signers: {} }),
    };
    const rail = new X402EvmRail(configSchema.parse(plugin.options), { clock, facilitator: failing });
    try {
      const payload = await payingClient(chain).createPaymentPayload(
        rail.paymentRequired({ url: 'mcp://tool/probe__echo', description: 'echo' }) as never,
      );
      const verified = await rail.verify(payload);
      if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
      const lastRetry = (verified.payment.validBefore - 6) * 1000 - 1;
      clock.set(new Date(lastRetry));
      expect(await rail.settle(verified.payment)).to.include({
        status: 'retry',
        reason: 'unexpected_settle_error',
      });
      clock.advance(1);
      expect(await rail.settle(verified.payment)).to.include({
        status: 'rejected',
        reason: 'authorization_expired',
      });
    } finally {
      await rail.stop();
    }
  });
});

/**
 * The built-in facilitator settles a payment it has verified itself without x402's second
 * verification, in one EIP-7966 synchronous send; everything else takes x402's own path.
 */
describe('payments: the built-in facilitator’s settlement of payments it verified', function () {
  this.timeout(60_000);
  const world = chainBehindProxy();

  /** A rail on the proxy (HTTP, so every request is seen), settling from its own dev account. */
  const railOnProxy = (options: Record<string, unknown> = {}) => {
    const { plugin, payTo } = railPlugin(world.chain, {
      rpcUrl: world.proxy.url,
      facilitator: { kind: 'builtin', privateKey: devAccountKey(8) },
      ...options,
    });
    return {
      rail: new X402EvmRail(configSchema.parse(plugin.options), { clock: systemClock }),
      payTo,
      options: plugin.options,
    };
  };
  const paymentFor = async (rail: X402EvmRail, payer?: LocalAccount) =>
    payingClient(world.chain, payer).createPaymentPayload(
      rail.paymentRequired({ url: 'test://fast-path', description: 'fast path' }) as PaymentRequired,
    );
  const verifiedBy = async (rail: X402EvmRail, payload: PaymentPayload) => {
    const outcome = await rail.verify(payload);
    if (!outcome.valid) throw new Error(`not verified: ${outcome.reason}`);
    return outcome.payment;
  };

  it('one synchronous send for a payment it verified, the payer’s code read once for both steps', async () => {
    const { rail, payTo } = railOnProxy();
    const payment = await verifiedBy(rail, await paymentFor(rail, await fundedPayer(world.chain)));
    const outcome = await rail.settle(payment);
    await rail.stop();
    expect(outcome.status, JSON.stringify(outcome)).to.equal('settled');
    expect(await balances(world.chain)(payTo)).to.equal(500n);
    expect(world.proxy.count('eth_sendRawTransactionSync')).to.equal(1);
    expect(world.proxy.count('eth_sendRawTransaction')).to.equal(0);
    // No estimate: the gas limit is the configured one; the fees were read during verification.
    expect(world.proxy.count('eth_estimateGas')).to.equal(0);
    expect(world.proxy.count('eth_fillTransaction')).to.equal(0);
    // The payer's code (verify reads it twice, settle twice more) and at most the token's once.
    expect(world.proxy.count('eth_getCode')).to.be.at.most(2);
  });

  it('peek and verify of one payload read it once (the same payment); the terms are made once, frozen', async () => {
    const { rail, payTo } = railOnProxy();
    const payload = await paymentFor(rail, await fundedPayer(world.chain));
    const peeked = rail.peek(payload);
    const verified = await verifiedBy(rail, payload);
    const settled = await rail.settle(verified);
    await rail.stop();
    expect(verified).to.equal(peeked);
    expect(settled.status, JSON.stringify(settled)).to.equal('settled');
    expect(await balances(world.chain)(payTo)).to.equal(500n);
    // A copy of the payload is read afresh, and found to be the same payment.
    const copy = rail.peek(structuredClone(payload));
    expect(copy).to.not.equal(peeked);
    expect(copy).to.deep.equal(peeked);
    const terms = rail.terms();
    expect(rail.terms()).to.equal(terms);
    expect(Object.isFrozen(terms) && Object.isFrozen(terms.asset)).to.equal(true);
    expect(terms.payTo).to.equal(getAddress(payTo));
    const [accepted] = rail.paymentRequired({ url: 'test://frozen', description: 'frozen' }).accepts;
    expect(Object.isFrozen(accepted)).to.equal(true);
  });

  it('a payment verified by another process is settled through x402’s path, once', async () => {
    const first = railOnProxy();
    const second = railOnProxy({ payTo: first.payTo });
    const payment = await verifiedBy(first.rail, await paymentFor(first.rail));
    const outcome = await second.rail.settle(payment);
    await Promise.all([first.rail.stop(), second.rail.stop()]);
    expect(outcome.status, JSON.stringify(outcome)).to.equal('settled');
    expect(world.proxy.count('eth_sendRawTransactionSync')).to.equal(0);
    expect(world.proxy.count('eth_sendRawTransaction')).to.equal(1);
    expect(await balances(world.chain)(first.payTo)).to.equal(500n);
  });

  it('an authorization altered after verification is not taken for the verified one: refused, nothing sent', async () => {
    const { rail, payTo, options } = railOnProxy();
    const parsed = configSchema.parse(options);
    const definition = devChainDefinition(world.proxy.url, world.chain.chainId);
    const facilitator = createFacilitator(
      parsed,
      definition,
      createPublicClient({ chain: definition, transport: http(world.proxy.url) }),
      systemClock,
    );
    const payload = await paymentFor(rail);
    const requirements = payload.accepted;
    expect((await facilitator.verify(payload, requirements)).isValid).to.equal(true);
    const altered = structuredClone(payload);
    const authorization = (altered.payload as { authorization: { validBefore: string } }).authorization;
    authorization.validBefore = String(BigInt(authorization.validBefore) + 1n);
    const refused = await facilitator.settle(altered, requirements);
    expect(refused.success).to.equal(false);
    expect(refused.errorReason).to.match(/signature/);
    expect(world.proxy.transactionsSent()).to.equal(0);
    // The payment as verified still settles, once.
    expect((await facilitator.settle(payload, requirements)).success).to.equal(true);
    expect(await balances(world.chain)(payTo)).to.equal(500n);
    await rail.stop();
  });

  it('a settlement signed ahead (while the host writes its mark) leaves only when settled: prepared out of order, both settle once', async () => {
    const { rail, payTo } = railOnProxy();
    const payer = await fundedPayer(world.chain);
    const first = await verifiedBy(rail, await paymentFor(rail, payer));
    const second = await verifiedBy(rail, await paymentFor(rail, payer));
    rail.prepareSettlement(first);
    rail.prepareSettlement(second);
    // Signed, not sent: nothing reaches the node until settle.
    await new Promise((resolve) => setImmediate(resolve));
    expect(world.proxy.transactionsSent()).to.equal(0);
    // The second's nonce follows the first's: sent first, it waits for it on the node.
    const outcomes = await Promise.all([rail.settle(second), rail.settle(first)]);
    await rail.stop();
    for (const outcome of outcomes) expect(outcome.status, JSON.stringify(outcome)).to.equal('settled');
    expect(world.proxy.count('eth_sendRawTransactionSync')).to.equal(2);
    expect(world.proxy.transactionsSent()).to.equal(2);
    expect(await balances(world.chain)(payTo)).to.equal(1000n);
  });

  it('a settlement signed ahead and discarded (its mark not written) never leaves; its nonce is filled, so the next settles', async () => {
    const { rail, payTo } = railOnProxy();
    const payer = await fundedPayer(world.chain);
    const dropped = await verifiedBy(rail, await paymentFor(rail, payer));
    const kept = await verifiedBy(rail, await paymentFor(rail, payer));
    const preparedDropped = rail.prepareSettlement(dropped);
    rail.prepareSettlement(kept);
    preparedDropped.discard();
    // The kept one took the nonce after the dropped one's: without the fill it would never mine.
    const outcome = await Promise.race([
      rail.settle(kept),
      new Promise<{ status: string }>((resolve) =>
        setTimeout(() => resolve({ status: 'hung: no receipt in 10 s' }), 10_000),
      ),
    ]);
    expect(outcome.status, JSON.stringify(outcome)).to.equal('settled');
    expect(await balances(world.chain)(payTo)).to.equal(500n);
    expect((await rail.status(dropped)).used).to.equal(false);
    expect((await rail.status(kept)).used).to.equal(true);
    // The dropped payment still settles, once, when asked (through x402's path: its verification was spent).
    expect((await rail.settle(dropped)).status).to.equal('settled');
    await rail.stop();
    expect(await balances(world.chain)(payTo)).to.equal(1000n);
  });

  it('a node without eth_sendRawTransactionSync: settled through x402’s path, and not asked again', async () => {
    const { rail, payTo } = railOnProxy();
    world.proxy.intercept = (methods) =>
      methods.includes('eth_sendRawTransactionSync') ? 'method-not-found' : 'forward';
    for (let i = 0; i < 2; i++) {
      const outcome = await rail.settle(await verifiedBy(rail, await paymentFor(rail)));
      expect(outcome.status, JSON.stringify(outcome)).to.equal('settled');
    }
    await rail.stop();
    expect(world.proxy.count('eth_sendRawTransactionSync')).to.equal(1);
    expect(world.proxy.count('eth_sendRawTransaction')).to.equal(2);
    expect(await balances(world.chain)(payTo)).to.equal(1000n);
  });
});

/**
 * The built-in facilitator decides a payment valid without recovering its signer when the fields match
 * the requirements and the token's simulation of the transfer succeeds; x402 decides everything else.
 */
describe('payments: verification with the signature left to the token’s simulation', function () {
  this.timeout(60_000);
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain();
  });
  after(() => chain?.stop());

  const setUp = async () => {
    const { plugin } = railPlugin(chain);
    const rail = new X402EvmRail(configSchema.parse(plugin.options), { clock: systemClock });
    const required = rail.paymentRequired({ url: 'test://simulation', description: 'x' }) as PaymentRequired;
    const client = createPublicClient({
      chain: devChainDefinition(chain.rpcUrl, chain.chainId),
      transport: http(chain.rpcUrl),
    });
    const codeAt = (address: string) => client.getCode({ address: address as Address });
    const payer = privateKeyToAccount(chain.accounts.payer.privateKey);
    await rail.stop();
    return { required, codeAt, payer };
  };
  const succeeded = Promise.resolve(undefined);

  it('valid: fields as required, the token has code, the payer none, the simulation succeeded', async () => {
    const { required, codeAt, payer } = await setUp();
    const payload = await craftPayment(chain, required, payer);
    expect(await validOnChain(payload, required.accepts[0]!, succeeded, codeAt, systemClock)).to.equal(true);
  });

  it('not decided (x402 then refuses) for what a successful simulation cannot rule out, or a failed one', async () => {
    const { required, codeAt, payer } = await setUp();
    const requirements = required.accepts[0]!;
    const now = BigInt(Math.floor(Date.now() / 1000));
    const stranger = privateKeyToAccount(generatePrivateKey()).address;
    const reverted = Promise.reject(new Error('FiatTokenV2: invalid signature'));
    reverted.catch(() => undefined);
    const cases: [string, Promise<unknown>, Awaited<ReturnType<typeof craftPayment>>, typeof requirements][] =
      [
        // The token would move the money to whoever was authorized, or the amount authorized.
        [
          'to a stranger',
          succeeded,
          await craftPayment(chain, required, payer, { authorization: { to: stranger } }),
          requirements,
        ],
        [
          'value 400',
          succeeded,
          await craftPayment(chain, required, payer, { authorization: { value: 400n } }),
          requirements,
        ],
        // Valid on chain now, but not for long enough to settle after the call.
        [
          'lapses in 3 s',
          succeeded,
          await craftPayment(chain, required, payer, { authorization: { validBefore: now + 3n } }),
          requirements,
        ],
        [
          'valid only later',
          succeeded,
          await craftPayment(chain, required, payer, { authorization: { validAfter: now + 60n } }),
          requirements,
        ],
        // A call to an address without code "succeeds" with nothing done.
        [
          'a token without code',
          succeeded,
          await craftPayment(chain, required, payer),
          { ...requirements, asset: stranger },
        ],
        // A payer with code signs through ERC-1271: x402's path.
        ['a payer with code', succeeded, await craftPayment(chain, required, payer), requirements],
        [
          'another scheme',
          succeeded,
          await craftPayment(chain, required, payer),
          { ...requirements, scheme: 'upto' },
        ],
        [
          'no EIP-712 domain',
          succeeded,
          await craftPayment(chain, required, payer),
          { ...requirements, extra: {} },
        ],
        ['the simulation reverted', reverted, await craftPayment(chain, required, payer), requirements],
      ];
    const withCode = cases.find(([name]) => name === 'a payer with code')![2];
    (withCode.payload as { authorization: { from: string } }).authorization.from = chain.token.address;
    for (const [name, simulation, payload, against] of cases) {
      expect(await validOnChain(payload, against, simulation, codeAt, systemClock), name).to.equal(false);
    }
  });
});
