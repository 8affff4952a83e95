import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { x402Client } from '@x402/core/client';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequired, PaymentRequirements } from '@x402/core/types';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { createPublicClient, http, parseAbi, type Address, type Hex, type LocalAccount } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { Clock } from '../../../../core/clock.ts';
import type { SigilConfig } from '../../../../services/config.ts';
import { openDatabase, type Database } from '../../../../core/db/database.ts';
import { devWallet } from '../../../../devchain/index.ts';
import type { Serving } from '../../../../services/serve.ts';
import {
  cancelAuthorizationTypes,
  chainClients,
  randomNonce,
  signTransfer,
  sigilDollarAbi,
  tokenDomain,
} from '../../../solidity/support.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { stickyDatabase, type ConfigOverrides, type TestDatabase } from '../../../support/kernel.ts';
import { ProbeWorld, walletToken } from '../support.ts';
import { eventually } from '../../../support/eventually.ts';
export { eventually };

const balanceAbi = parseAbi(['function balanceOf(address account) view returns (uint256)']);

/** The payment rail plugin on the dev chain, settling from the operator's account to a fresh payee. */
export function railPlugin(
  chain: DevChain,
  options: Record<string, unknown> = {},
): { plugin: SigilConfig['plugins'][number]; payTo: Address } {
  const payTo = (options.payTo as Address | undefined) ?? privateKeyToAccount(generatePrivateKey()).address;
  const plugin = {
    resolve: 'payments-x402-evm',
    enabled: true,
    options: {
      network: `eip155:${chain.chainId}`,
      rpcUrl: chain.rpcUrl.replace(/^http/, 'ws'),
      asset: chain.token,
      facilitator: { kind: 'builtin', privateKey: chain.accounts.operator.privateKey },
      ...options,
      payTo,
    },
  };
  return { plugin, payTo };
}

/** An x402 client paying in the dev chain's token (x402's default spend controls know only Base USDC). */
export function payingClient(
  chain: DevChain,
  account: LocalAccount = privateKeyToAccount(chain.accounts.payer.privateKey),
): x402Client {
  return new x402Client().register(`eip155:${chain.chainId}`, new ExactEvmClient(account)).setSpendControls({
    allowedAssets: [{ network: `eip155:${chain.chainId}`, asset: chain.token.address }],
  });
}

/** x402's MCP transport: the payment in a call's `_meta`, the receipt in its result's (as a client spells them). */
export const PAYMENT = 'x402/payment';
export const RECEIPT = 'x402/payment-response';

export const pay = (client: x402Client, required: PaymentRequired): Promise<PaymentPayload> =>
  client.createPaymentPayload(required);

export function balances(chain: DevChain) {
  const publicClient = createPublicClient({ transport: http(chain.rpcUrl) });
  return (account: Address): Promise<bigint> =>
    publicClient.readContract({
      address: chain.token.address,
      abi: balanceAbi,
      functionName: 'balanceOf',
      args: [account],
    });
}

/**
 * A payer (fresh unless given) holding `amount` base units (10 USD by default), minted by the token's
 * owner (the operator). Gateways in these tests settle from other accounts, so this never races their
 * nonces.
 */
export async function fundedPayer(
  chain: DevChain,
  amount = 10_000_000n,
  account: LocalAccount = privateKeyToAccount(generatePrivateKey()),
): Promise<LocalAccount> {
  if (amount > 0n) await mint(chain, account.address, amount);
  return account;
}

/** `amount` base units minted to `to` by the token's owner (the operator); resolves once mined. */
export async function mint(chain: DevChain, to: Address, amount: bigint): Promise<void> {
  const { publicClient, operatorWallet } = chainClients(chain);
  const hash = await operatorWallet.writeContract({
    address: chain.token.address,
    abi: sigilDollarAbi,
    functionName: 'mint',
    args: [to, amount],
  });
  const receipt = await publicClient.waitForTransactionReceipt({ hash });
  if (receipt.status !== 'success') throw new Error(`minting for ${to} failed`);
}

/**
 * The payer cancels the EIP-3009 authorization of `payment` on chain: it signs a CancelAuthorization
 * for the nonce (viem signTypedData) and anyone, here the token's owner, submits it; resolves once mined.
 */
export async function cancelAuthorization(
  chain: DevChain,
  payer: LocalAccount,
  payment: PaymentPayload,
): Promise<void> {
  const hash = await sendCancelAuthorization(chain, payer, payment);
  const receipt = await chainClients(chain).publicClient.waitForTransactionReceipt({ hash });
  if (receipt.status !== 'success') throw new Error(`cancelling ${hash} reverted`);
}

/** The cancellation of `cancelAuthorization`, sent with `fees` and gas when given (no estimate); resolves once sent. */
export async function sendCancelAuthorization(
  chain: DevChain,
  payer: LocalAccount,
  payment: PaymentPayload,
  fees: { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint; gas: bigint } | object = {},
): Promise<Hex> {
  const { nonce } = (payment.payload as { authorization: { nonce: Hex } }).authorization;
  const signature = await payer.signTypedData({
    domain: tokenDomain(chain),
    types: cancelAuthorizationTypes,
    primaryType: 'CancelAuthorization',
    message: { authorizer: payer.address, nonce },
  });
  return chainClients(chain).operatorWallet.writeContract({
    address: chain.token.address,
    abi: sigilDollarAbi,
    functionName: 'cancelAuthorization',
    args: [payer.address, nonce, signature],
    ...fees,
  });
}

/**
 * The JSON-RPC error a call is refused with: the SDK 1.x throws it as McpError, the SDK v2 as
 * ProtocolError (`as`).
 */
export async function refusal(call: Promise<unknown>): Promise<McpError>;
export async function refusal<E>(call: Promise<unknown>, as: new (...args: never[]) => E): Promise<E>;
export async function refusal(call: Promise<unknown>, as: new (...args: never[]) => unknown = McpError) {
  const err = await call.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(err, 'the call was refused').to.be.instanceOf(as);
  return err;
}

/** The key of anvil dev account `index` (3…9 are unused by the dev chain): a facilitator of its own. */
export const devAccountKey = (index: number): Hex => devWallet(index).privateKey as Hex;

/** Signs `account` in (SIWE) and creates a wallet token for it. */
export const walletTokenFor = async (gatewayUrl: string, account: LocalAccount): Promise<string> =>
  (await walletToken(gatewayUrl, account)).token;

/**
 * An x402 `exact` payment signed by hand (viem signTypedData), so tests can craft what a well-behaved
 * client never sends: an expired window, another amount or payee, an accepted object that differs.
 */
export async function craftPayment(
  chain: DevChain,
  required: PaymentRequired,
  signer: LocalAccount,
  change: {
    accepted?: Partial<PaymentRequirements>;
    authorization?: Partial<{ to: Address; value: bigint; validAfter: bigint; validBefore: bigint }>;
  } = {},
): Promise<PaymentPayload> {
  const accepted = { ...required.accepts[0]!, ...change.accepted };
  const now = BigInt(Math.floor(Date.now() / 1000));
  const authorization = {
    from: signer.address,
    to: accepted.payTo as Address,
    value: BigInt(accepted.amount),
    validAfter: now - 600n,
    validBefore: now + BigInt(accepted.maxTimeoutSeconds),
    nonce: randomNonce(),
    ...change.authorization,
  };
  const signature = await signTransfer(signer, authorization, tokenDomain(chain));
  return {
    x402Version: 2,
    resource: required.resource,
    accepted,
    payload: {
      signature,
      authorization: {
        from: authorization.from,
        to: authorization.to,
        value: authorization.value.toString(),
        validAfter: authorization.validAfter.toString(),
        validBefore: authorization.validBefore.toString(),
        nonce: authorization.nonce,
      },
    },
  };
}

/** A row of payment_settlements, as the tests read it. */
export interface SettlementRecord {
  id: string;
  state: 'executing' | 'settling' | 'settled' | 'released' | 'failed';
  payer: string;
  amount: string;
  transaction: string | null;
  reason: string | null;
  attempts: number;
  /** The call's result kept for its payer (JSON, sealed when a data key is set), or null. */
  result?: string | null;
}

/** A second connection on a gateway's database, to read what it recorded. */
export async function recordsOf(url: string, schema?: string): Promise<Database> {
  return openDatabase({ url, ...(schema === undefined ? {} : { schema }) });
}

export async function settlementRows(db: Database): Promise<SettlementRecord[]> {
  const rows = (await db('payment_settlements').select()) as (SettlementRecord & { attempts: unknown })[];
  return rows.map((row) => ({ ...row, attempts: Number(row.attempts) }));
}

/** How long a settled mark may take after the answer (the retry worker's claim lasts a minute). */
const SETTLED_MARK_MS = 2_000;

/**
 * The books of one gateway: its payee is fresh, its payers are tracked from their funding, so at any
 * quiet moment the records, the chain and the reconciler must tell the same story.
 */
export async function expectBooksBalanced(options: {
  chain: DevChain;
  gatewayUrl: string;
  operatorToken: string;
  records: Database;
  payTo: Address;
  /** Every payer that paid this gateway, with its balance before its first payment. */
  payers: { address: Address; before: bigint }[];
}): Promise<{ settled: bigint; rows: SettlementRecord[] }> {
  const balanceOf = balances(options.chain);
  // A paid answer leaves while its settled mark is written: a moment later the mark is in.
  const rows = await eventually(
    'the settled marks of answered calls',
    async () => {
      const current = await settlementRows(options.records);
      return !current.some((row) => row.state === 'settling') && current;
    },
    SETTLED_MARK_MS,
  ).catch(() => settlementRows(options.records));
  const settled = rows
    .filter((row) => row.state === 'settled')
    .reduce((sum, row) => sum + BigInt(row.amount), 0n);
  const unfinished = rows.filter((row) => row.state === 'settling' || row.state === 'executing');
  expect(unfinished, 'nothing under way').to.deep.equal([]);
  expect(await balanceOf(options.payTo), 'payTo holds the settled amounts').to.equal(settled);
  let lost = 0n;
  for (const payer of options.payers) lost += payer.before - (await balanceOf(payer.address));
  expect(lost, "the payers' loss is the settled amounts").to.equal(settled);
  const res = await fetch(`${options.gatewayUrl}/api/payments/reconciliation`, {
    headers: { authorization: `Bearer ${options.operatorToken}` },
  });
  expect(res.status).to.equal(200);
  const report = (await res.json()) as { checked: number; onChain: number; mismatches: unknown[] };
  expect(report.mismatches).to.deep.equal([]);
  expect(report.checked).to.equal(rows.length);
  expect(report.onChain).to.equal(rows.filter((row) => row.state === 'settled').length);
  return { settled, rows };
}

let sharedWorld: Promise<ProbeWorld> | undefined;

/**
 * One probe world (verdaccio, the probe installed once: about 15 s) for every payments test file of
 * this run; a file that uses it stops it in a root-level `after` hook (after all files).
 */
export function sharedProbeWorld(): Promise<ProbeWorld> {
  sharedWorld ??= ProbeWorld.start();
  return sharedWorld;
}

export async function stopSharedProbeWorld(): Promise<void> {
  const world = sharedWorld;
  sharedWorld = undefined;
  await (await world?.catch(() => undefined))?.stop();
}

/** What a gateway paid on the dev chain needs: its URL, records, payee, operator and a funded payer. */
export interface PaidGateway {
  url: string;
  payTo: Address;
  /** A second connection on the gateway's database. */
  records: Database;
  /** An operator wallet token (for the reconciliation report). */
  operatorToken: string;
  payer: LocalAccount;
  payerBefore: bigint;
  serving: Serving;
  /** The gateway's database: the same one each time (for a replica or a restart). */
  database: TestDatabase;
  /** The books must balance (see expectBooksBalanced) for this gateway's payee and payer. */
  expectBalanced(
    extraPayers?: { address: Address; before: bigint }[],
  ): ReturnType<typeof expectBooksBalanced>;
  /** A REST tool call, with a payment in PAYMENT-SIGNATURE when given. */
  callRest(tool: string, args: unknown, payment?: PaymentPayload): Promise<Response>;
  /** The PaymentRequired of an unpaid REST call of `tool`. */
  required(tool?: string): Promise<PaymentRequired>;
  stop(): Promise<void>;
}

/**
 * A gateway on `database` with the probe catalog and the rail on `chain` (through `rpcUrl`, e.g. a
 * proxy), settling from anvil dev account `facilitatorIndex`, paid to a fresh payee.
 */
export async function paidGateway(
  world: ProbeWorld,
  chain: DevChain,
  database: TestDatabase,
  options: {
    facilitatorIndex: number;
    rpcUrl?: string;
    railOptions?: Record<string, unknown>;
    gateway?: Partial<SigilConfig['gateway']>;
    clock?: Clock;
    /** database.dataKey of the gateway. */
    dataKey?: string;
    /** More of the gateway's database section (replicas: `shared`, heartbeats, leases). */
    database?: ConfigOverrides['database'];
    /** Another replica of this gateway: the same database and payee (its own facilitator account). */
    replicaOf?: PaidGateway;
  },
): Promise<PaidGateway> {
  const operator = privateKeyToAccount(generatePrivateKey());
  const rail = railPlugin(chain, {
    facilitator: { kind: 'builtin', privateKey: devAccountKey(options.facilitatorIndex) },
    ...(options.rpcUrl ? { rpcUrl: options.rpcUrl } : {}),
    ...(options.replicaOf ? { payTo: options.replicaOf.payTo } : {}),
    ...options.railOptions,
  });
  const sticky = options.replicaOf
    ? { database: options.replicaOf.database, drop: async () => undefined }
    : stickyDatabase(database);
  const fresh = sticky.database.fresh();
  const serving = await world.gateway(
    sticky.database,
    { operatorWallets: [operator.address], ...options.gateway },
    {
      plugins: [rail.plugin],
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.dataKey ? { dataKey: options.dataKey } : {}),
      ...(options.database ? { database: options.database } : {}),
    },
  );
  const records = await recordsOf(fresh.url, fresh.schema);
  const [operatorToken, payer] = await Promise.all([
    walletTokenFor(serving.url, operator),
    fundedPayer(chain),
  ]);
  const payerBefore = await balances(chain)(payer.address);
  const callRest = (tool: string, args: unknown, payment?: PaymentPayload) =>
    fetch(`${serving.url}/api/servers/probe/tools/${tool}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(payment ? { 'payment-signature': encodePaymentSignatureHeader(payment) } : {}),
      },
      body: JSON.stringify({ arguments: args }),
    });
  return {
    url: serving.url,
    payTo: rail.payTo,
    records,
    operatorToken,
    payer,
    payerBefore,
    serving,
    database: sticky.database,
    callRest,
    expectBalanced: (extraPayers = []) =>
      expectBooksBalanced({
        chain,
        gatewayUrl: serving.url,
        operatorToken,
        records,
        payTo: rail.payTo,
        payers: [{ address: payer.address, before: payerBefore }, ...extraPayers],
      }),
    required: async (tool = 'echo') => {
      const res = await callRest(tool, tool === 'echo' ? { message: 'unpaid' } : {});
      expect(res.status).to.equal(402);
      return decodePaymentRequiredHeader(res.headers.get('payment-required') as string);
    },
    stop: async () => {
      await serving.stop();
      await records.destroy();
      await sticky.drop();
    },
  };
}

/** The shared probe world and a fresh dev chain, and the anvil accounts its gateways settle from. */
export interface AnvilWorld {
  readonly world: ProbeWorld;
  readonly chain: DevChain;
  /** The next unused anvil dev account (3, 4, …): a facilitator of its own for each gateway. */
  nextFacilitator(): number;
}

/**
 * The shared probe world and a fresh dev chain for the enclosing describe block (started in `before`,
 * the chain stopped in `after`).
 */
export function anvilWorld(): AnvilWorld {
  let next = 3;
  const anvil = { nextFacilitator: () => next++ } as { world: ProbeWorld; chain: DevChain } & AnvilWorld;
  before(async () => {
    [anvil.world, anvil.chain] = await Promise.all([sharedProbeWorld(), startDevChain()]);
  });
  after(async () => {
    await anvil.chain?.stop();
  });
  return anvil;
}

/**
 * A paid gateway on `database` whose rail reaches the chain through an RpcProxy, for the enclosing
 * describe block (started in `before`, stopped in `after`); the proxy's switches reset after each test.
 */
export function gatewayBehindProxy(
  anvil: AnvilWorld,
  database: TestDatabase,
  options: { clock?: Clock } = {},
): { readonly gateway: PaidGateway; readonly proxy: RpcProxy } {
  const setup = {} as { gateway: PaidGateway; proxy: RpcProxy };
  before(async () => {
    setup.proxy = await RpcProxy.start(anvil.chain.rpcUrl);
    setup.gateway = await paidGateway(anvil.world, anvil.chain, database, {
      facilitatorIndex: anvil.nextFacilitator(),
      rpcUrl: setup.proxy.url,
      ...options,
    });
  });
  afterEach(() => setup.proxy?.reset());
  after(async () => {
    await setup.gateway?.stop();
    await setup.proxy?.stop();
  });
  return setup;
}

/**
 * A fresh dev chain with an RpcProxy in front of it for the enclosing describe block (started in
 * `before`, stopped in `after`); the proxy's switches and counts are reset after each test.
 */
export function chainBehindProxy(): { readonly chain: DevChain; readonly proxy: RpcProxy } {
  const world = {} as { chain: DevChain; proxy: RpcProxy };
  before(async () => {
    world.chain = await startDevChain();
    world.proxy = await RpcProxy.start(world.chain.rpcUrl);
  });
  after(async () => {
    await world.proxy?.stop();
    await world.chain?.stop();
  });
  afterEach(() => world.proxy.reset());
  return world;
}

/**
 * The rail plugin on a `chainBehindProxy` chain, talking to it through the proxy and settling from the
 * dev account `account` (its key as `key`); `facilitator` adds to the built-in facilitator's options.
 */
export function railThroughProxy(
  world: { readonly chain: DevChain; readonly proxy: RpcProxy },
  account: number,
  options: Record<string, unknown> & { facilitator?: Record<string, unknown> } = {},
): { plugin: SigilConfig['plugins'][number]; payTo: Address; key: Hex } {
  const key = devAccountKey(account);
  const { facilitator, ...rest } = options;
  const rail = railPlugin(world.chain, {
    ...rest,
    facilitator: { kind: 'builtin', privateKey: key, ...facilitator },
    rpcUrl: world.proxy.url,
  });
  return { ...rail, key };
}

/** Whether a JSON-RPC request sends a transaction (EIP-7966's synchronous send included). */
export const sendsTransaction = (methods: string[]): boolean =>
  methods.some((method) => method === 'eth_sendRawTransaction' || method === 'eth_sendRawTransactionSync');

/**
 * How the RPC proxy treats one request: pass it on, cut the connection, pass it on and lose the
 * answer, answer that the method does not exist (as a node without it would), or answer with an
 * empty list (as a node whose log index lags behind its head answers eth_getLogs).
 */
export type ProxyDecision = 'forward' | 'cut' | 'lose-answer' | 'method-not-found' | 'lagging';

/**
 * A JSON-RPC proxy in front of anvil that tests can switch off, as an RPC outage: while `down`, every
 * request's connection is cut (the client sees a network error). `intercept` sees each request's
 * methods first and may hold it (return a promise) or decide its fate.
 */
export class RpcProxy {
  down = false;
  intercept: ((methods: string[]) => ProxyDecision | Promise<ProxyDecision>) | undefined;
  /** JSON-RPC calls that reached the proxy, by method (also while down). */
  readonly seen = new Map<string, number>();
  /** Signed transactions passed on to the node, in the order they were. */
  readonly transactions: Hex[] = [];
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly upstream: string,
    readonly url: string,
  ) {}

  static async start(upstream: string): Promise<RpcProxy> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const proxy = new RpcProxy(server, upstream, `http://127.0.0.1:${port}`);
    server.on('connection', (socket) => {
      proxy.sockets.add(socket);
      socket.on('close', () => proxy.sockets.delete(socket));
    });
    server.on('request', (req, res) => void proxy.handle(req, res));
    return proxy;
  }

  /** Back to passing everything on, with no requests counted. */
  reset(): void {
    this.down = false;
    this.intercept = undefined;
    this.seen.clear();
    this.transactions.length = 0;
  }

  count(method: string): number {
    return this.seen.get(method) ?? 0;
  }

  /** Transactions sent through the proxy, either way. */
  transactionsSent(): number {
    return this.count('eth_sendRawTransaction') + this.count('eth_sendRawTransactionSync');
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    let messages: { id?: unknown; method?: string }[] = [];
    try {
      const parsed = JSON.parse(body) as { method?: string } | { method?: string }[];
      messages = Array.isArray(parsed) ? parsed : [parsed];
    } catch {
      // Not JSON: forwarded as it is; anvil answers.
    }
    const methods = messages.map((message) => String(message.method));
    for (const method of methods) this.seen.set(method, this.count(method) + 1);
    const decision = this.down ? 'cut' : ((await this.intercept?.(methods)) ?? 'forward');
    if (decision === 'cut' || this.down) {
      req.socket.destroy();
      return;
    }
    if (decision === 'lagging') {
      const empty = messages.map(({ id }) => ({ jsonrpc: '2.0', id, result: [] }));
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify(empty.length === 1 ? empty[0] : empty));
      return;
    }
    if (decision === 'method-not-found') {
      const errors = messages.map(({ id, method }) => ({
        jsonrpc: '2.0',
        id,
        error: { code: -32601, message: `the method ${method} does not exist/is not available` },
      }));
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify(errors.length === 1 ? errors[0] : errors));
      return;
    }
    for (const message of messages as { method?: string; params?: unknown[] }[])
      if (sendsTransaction([String(message.method)])) this.transactions.push(message.params?.[0] as Hex);
    try {
      const answer = await fetch(this.upstream, {
        method: 'POST',
        headers: { 'content-type': req.headers['content-type'] ?? 'application/json' },
        body,
      });
      const text = await answer.text();
      if (decision === 'lose-answer' || this.down) {
        req.socket.destroy();
        return;
      }
      res.writeHead(answer.status, { 'content-type': 'application/json' }).end(text);
    } catch {
      req.socket.destroy();
    }
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
