import { x402Client } from '@x402/core/client';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { createPublicClient, http, parseAbi, type Address, type Hex, type PublicClient } from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import {
  failWith,
  x402PaymentRequiredSchema,
  type EvidenceLog,
  type X402PaymentRequiredWire,
  type X402Requirements,
} from '@sigil/plugin-api/kit';
import type { HttpRequest, HttpResponse } from '../http.ts';
import { decodeHeader, encodeHeader, HEADER } from '../x402.ts';
import type { DeploymentContext } from './context.ts';

/**
 * The tester's payer: a funded wallet lent to the runner (`--payer-key`), and optionally the chain's
 * RPC (`--rpc-url`) to read what a payment moved. It pays x402 v2 `exact` payments on EVM networks
 * (EIP-3009 authorizations, signed here; nothing is sent to the chain by the runner), never more than
 * `MAX_PAYMENT_USD` per payment, whatever a deployment asks.
 */

/** The most the runner pays for one call, in dollars: twenty times the spec's 0.0005 USD. */
export const MAX_PAYMENT_USD = '0.01';
/** Base units of 0.01 USD at `decimals`. */
const maxUnits = (decimals: number): bigint => 10n ** BigInt(Math.max(0, decimals - 2));
/** Dollar tokens (USDC, the spec's "dollar-pegged stablecoin") have 6 decimals; the chain says otherwise. */
const ASSUMED_DECIMALS = 6;

const erc20 = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function decimals() view returns (uint8)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
]);

/** How long a paid request may take: the gateway settles on chain before it answers. */
export const PAID_TIMEOUT_MS = 45_000;

/** One payment the runner made: what it accepted and the payload it sent. */
export interface Payment {
  accepted: X402Requirements;
  payload: PaymentPayload;
  /** The EIP-3009 authorization inside: who pays, and its nonce. */
  from: Address;
  nonce: Hex;
}

export class Payer {
  readonly address: Address;
  private readonly account: PrivateKeyAccount;
  private readonly client: PublicClient | undefined;
  private chain: Promise<number> | undefined;
  private readonly decimalsOf = new Map<string, Promise<number | undefined>>();

  constructor(
    key: Hex,
    /** Without it, the runner can pay but not see what moved. */
    readonly rpcUrl: string | undefined,
  ) {
    this.account = privateKeyToAccount(key);
    this.address = this.account.address;
    this.client = rpcUrl === undefined ? undefined : createPublicClient({ transport: http(rpcUrl) });
  }

  get canReadChain(): boolean {
    return this.client !== undefined;
  }

  /** The RPC's chain id (read once). */
  chainId(): Promise<number> {
    const client = this.requireClient();
    this.chain ??= client.getChainId();
    return this.chain;
  }

  /** The asset's decimals as the chain says, or undefined when it does not answer `decimals()`. */
  decimals(asset: string): Promise<number | undefined> {
    const key = asset.toLowerCase();
    let known = this.decimalsOf.get(key);
    if (!known) {
      known = this.requireClient()
        .readContract({ address: asset as Address, abi: erc20, functionName: 'decimals' })
        .then(Number)
        .catch(() => undefined);
      this.decimalsOf.set(key, known);
    }
    return known;
  }

  async balanceOf(asset: string, owner: string, evidence?: EvidenceLog): Promise<bigint> {
    const balance = await this.requireClient().readContract({
      address: asset as Address,
      abi: erc20,
      functionName: 'balanceOf',
      args: [owner as Address],
    });
    evidence?.note(`on chain: balanceOf(${owner}) of ${asset} = ${balance}`);
    return balance;
  }

  /** Whether the chain has used the payment's authorization; undefined when the token cannot say. */
  async authorizationUsed(payment: Payment, evidence?: EvidenceLog): Promise<boolean | undefined> {
    try {
      const used = await this.requireClient().readContract({
        address: payment.accepted.asset as Address,
        abi: erc20,
        functionName: 'authorizationState',
        args: [payment.from, payment.nonce],
      });
      evidence?.note(
        `on chain: authorizationState(${payment.from}, nonce …${payment.nonce.slice(-8)}) = ${used}`,
      );
      return used;
    } catch {
      return undefined;
    }
  }

  /**
   * Signs a payment for `required`: its first `exact` entry on an EVM network (the RPC's, when one is
   * given). Fails the check when there is none, or when it asks more than the runner ever pays.
   */
  async pay(required: X402PaymentRequiredWire, evidence: EvidenceLog, what: string): Promise<Payment> {
    const chainId = this.client ? await this.chainId() : undefined;
    const offered = required.accepts.map((entry) => `${entry.scheme} on ${entry.network}`).join(', ');
    const accepted = required.accepts.find(
      (entry) =>
        entry.scheme === 'exact' &&
        (chainId === undefined ? /^eip155:\d+$/.test(entry.network) : entry.network === `eip155:${chainId}`),
    );
    if (!accepted) {
      failWith(
        `${what}: the runner pays x402 "exact" payments on ${chainId === undefined ? 'EVM networks' : `eip155:${chainId} (the chain of --rpc-url)`}; the deployment accepts ${offered}`,
      );
    }
    const decimals = (this.client ? await this.decimals(accepted.asset) : undefined) ?? ASSUMED_DECIMALS;
    const cap = maxUnits(decimals);
    if (BigInt(accepted.amount) > cap) {
      failWith(
        `${what}: the deployment asks ${accepted.amount} base units of ${accepted.asset}, more than the runner ever pays (${MAX_PAYMENT_USD} USD = ${cap} base units at ${decimals} decimals)`,
      );
    }
    const network = accepted.network as `${string}:${string}`;
    const client = new x402Client().register(network, new ExactEvmClient(this.account)).setSpendControls({
      allowedAssets: [{ network, asset: accepted.asset, maxAmountPerPayment: cap.toString() }],
    });
    let payload: PaymentPayload;
    try {
      payload = await client.createPaymentPayload({ ...required, accepts: [accepted] } as PaymentRequired);
    } catch (err) {
      failWith(`${what}: cannot sign a payment for ${JSON.stringify(accepted)}: ${(err as Error).message}`);
    }
    const authorization = (payload.payload as { authorization?: { from?: string; nonce?: string } })
      .authorization;
    if (!authorization?.from || !authorization.nonce)
      failWith(`${what}: the payment signed has no EIP-3009 authorization`);
    evidence.note(
      `paid for ${what}: ${accepted.amount} base units of ${accepted.asset} to ${accepted.payTo}`,
      {
        payer: this.address,
        network: accepted.network,
        nonce: `…${authorization.nonce.slice(-8)}`,
      },
    );
    return {
      accepted,
      payload,
      from: authorization.from as Address,
      nonce: authorization.nonce as Hex,
    };
  }

  private requireClient(): PublicClient {
    if (!this.client) failWith('no --rpc-url was given: the runner cannot read the chain');
    return this.client;
  }
}

/** The x402 v2 `PaymentRequired` of a 402 answer's PAYMENT-REQUIRED header, or undefined. */
export function requiredOfResponse(response: HttpResponse): X402PaymentRequiredWire | undefined {
  const parsed = x402PaymentRequiredSchema.safeParse(decodeHeader(response.headers.get(HEADER.required)));
  return parsed.success ? parsed.data : undefined;
}

/** An x402 v2 `PaymentRequired` of an MCP reply, and where the reply carries it (as reasons name it). */
export interface McpPaymentRequired {
  required: X402PaymentRequiredWire;
  place: string;
}

/**
 * The x402 v2 `PaymentRequired` an MCP reply asks with, and where: x402's MCP transport puts it in a
 * tool result with `isError` (`structuredContent`, or JSON in `content[0].text`); older drafts and
 * Sigil in a JSON-RPC error's `data`; an HTTP 402 may carry it in PAYMENT-REQUIRED too. A place
 * names the HTTP status and, for an error, its code: a client finds the terms by all of them.
 */
export function locateMcpPaymentRequired(reply: {
  response: HttpResponse;
  message?: unknown;
}): McpPaymentRequired | undefined {
  const read = (value: unknown) => {
    const parsed = x402PaymentRequiredSchema.safeParse(value);
    return parsed.success ? parsed.data : undefined;
  };
  const found = (required: X402PaymentRequiredWire | undefined, place: string) =>
    required && { required, place: `${place} (HTTP ${reply.response.status})` };
  const message = (reply.message ?? {}) as {
    error?: { code?: unknown; data?: unknown };
    result?: { isError?: unknown; structuredContent?: unknown; content?: { text?: unknown }[] };
  };
  const fromError = found(
    read(message.error?.data),
    `the data of JSON-RPC error ${String(message.error?.code)}`,
  );
  if (fromError) return fromError;
  const result = message.result;
  if (result?.isError === true) {
    const structured = found(read(result.structuredContent), "an isError result's structuredContent");
    if (structured) return structured;
    const text = result.content?.[0]?.text;
    if (typeof text === 'string') {
      try {
        const fromText = found(read(JSON.parse(text)), "an isError result's first text");
        if (fromText) return fromText;
      } catch {
        // not JSON: not a payment request
      }
    }
  }
  return found(requiredOfResponse(reply.response), 'the PAYMENT-REQUIRED header');
}

/** The x402 v2 `PaymentRequired` an MCP reply asks with, wherever it carries it, or undefined. */
export const requiredOfMcp = (reply: {
  response: HttpResponse;
  message?: unknown;
}): X402PaymentRequiredWire | undefined => locateMcpPaymentRequired(reply)?.required;

/**
 * A REST request that pays when asked: sent as is; when the gateway answers 402 with an x402
 * PAYMENT-REQUIRED and the tester lent a payer, paid and sent again with PAYMENT-SIGNATURE. Without a
 * payer the 402 comes back for the caller to judge.
 */
export async function requestPaying(
  context: DeploymentContext,
  request: HttpRequest,
  what: string,
): Promise<{ response: HttpResponse; payment?: Payment }> {
  const response = await context.http.request(request);
  if (response.status !== 402 || !context.payer) return { response };
  const required = requiredOfResponse(response);
  if (!required) return { response };
  const payment = await context.payer.pay(required, context.evidence, what);
  const paid = await context.http.request({
    ...request,
    headers: { ...request.headers, [HEADER.signature]: encodeHeader(payment.payload) },
    // A paid answer waits for its settlement on chain.
    timeoutMs: Math.max(request.timeoutMs ?? 0, PAID_TIMEOUT_MS),
  });
  return { response: paid, payment };
}
