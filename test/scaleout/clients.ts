import { setTimeout as delay } from 'node:timers/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { decodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload } from '@x402/core/types';
import { wrapFetchWithPayment } from '@x402/fetch';
import type { LocalAccount, PrivateKeyAccount } from 'viem/accounts';
import { payingClient, PAYMENT } from '../services/gateway/payments/support.ts';
import { walletToken } from '../services/gateway/support.ts';
import {
  readSse,
  runtimeClient,
  signIn,
  storeAndUnlock,
  type SseEvent,
} from '../services/runtime/chat-support.ts';
import { PROVIDER_VAULT_MESSAGE } from '../../services/runtime/vault/index.ts';
import type { DevChain } from '../support/chain.ts';

/**
 * The clients of the scale-out proof's operations, each as a user's client does it through the
 * balancer, each recording how it ended as its client saw it (an {@link Outcome}), never throwing.
 */

/** How an operation ended, as its client saw it. */
export type Outcome =
  /** Answered as asked (`recovered`: after what its client did as the docs say, e.g. a stream resent). */
  | { end: 'answered'; status: number; recovered?: string[] }
  /** Refused with a JSON error that names a code (Sigil's, the balancer's, or an MCP JSON-RPC error). */
  | { end: 'refused'; status: number; code: string; reason?: string; recovered?: string[] }
  /** No answer a client can act on: a body without a code, a connection or stream cut with no error. */
  | { end: 'unclear'; detail: string }
  /** Its client's timeout ran out first. */
  | { end: 'hung'; detail: string };

/** How long any one operation may take, recoveries included: no request waits longer. */
export const OPERATION_TIMEOUT_MS = 90_000;

/** A refusal's JSON (Sigil's and the balancer's shape). */
interface ErrorBody {
  code?: unknown;
  details?: { reason?: unknown };
}

/** The outcome of an answer that came: a 2xx, or a JSON error with a code, or else unclear. */
export async function outcomeOf(response: Response): Promise<Outcome> {
  const text = await response.text();
  if (response.ok) return { end: 'answered', status: response.status };
  let body: ErrorBody | undefined;
  try {
    body = JSON.parse(text) as ErrorBody;
  } catch {
    body = undefined;
  }
  if (typeof body?.code !== 'string')
    return { end: 'unclear', detail: `${response.status} without a JSON code: ${text.slice(0, 200)}` };
  const reason = body.details?.reason;
  return {
    end: 'refused',
    status: response.status,
    code: body.code,
    ...(typeof reason === 'string' ? { reason } : {}),
  };
}

/** The outcome of a request that threw: hung when its deadline passed, else unclear. */
export function outcomeOfThrown(err: unknown, deadline: AbortSignal): Outcome {
  const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return deadline.aborted ? { end: 'hung', detail } : { end: 'unclear', detail };
}

/** The EIP-3009 nonce of an x402 payment: the last part of the gateway's payment id. */
export const nonceOfPayment = (payment: PaymentPayload): string =>
  (payment.payload as { authorization: { nonce: string } }).authorization.nonce.toLowerCase();

/** A paid call's outcome, with the nonces of the payments its client signed for it. */
export interface PaidOutcome {
  outcome: Outcome;
  nonces: string[];
}

/**
 * A paid REST tool call as examples/pay-over-rest.mjs makes it (`@x402/fetch` answering the 402);
 * answered 5xx after paying, its kept result is asked for ({@link withKeptResult}).
 */
export async function payOverRest(options: {
  gatewayUrl: string;
  chain: DevChain;
  payer: LocalAccount;
  tool: string;
  args: Record<string, unknown>;
  headers?: Record<string, string>;
}): Promise<PaidOutcome> {
  const { gatewayUrl, chain, payer } = options;
  const deadline = AbortSignal.timeout(OPERATION_TIMEOUT_MS);
  const nonces: string[] = [];
  let last: Response | undefined;
  const recording = async (input: string | URL | Request, init?: RequestInit) => {
    const request = new Request(input, init);
    const header = request.headers.get('payment-signature');
    if (header) nonces.push(nonceOfPayment(decodePaymentSignatureHeader(header)));
    last = await fetch(request);
    return last.clone();
  };
  const paying = wrapFetchWithPayment(recording, payingClient(chain, payer));
  let outcome: Outcome;
  try {
    outcome = await outcomeOf(
      await paying(`${gatewayUrl}/api/servers/probe/tools/${options.tool}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...options.headers },
        body: JSON.stringify({ arguments: options.args }),
        signal: deadline,
      }),
    );
  } catch (err) {
    // x402's client throws on some refusals after the paid try: the answer it read says how it ended.
    outcome = last && !deadline.aborted ? await outcomeOf(last) : outcomeOfThrown(err, deadline);
  }
  return withKeptResult(options, { outcome, nonces }, deadline);
}

/**
 * A paid call answered 5xx after its payment was sent (its replica died, say) as its client goes on,
 * as the balancer's error hints: the payer signs in with its wallet and asks for the kept result of
 * its payment, again after each 409 (still settling) as its Retry-After says, until the deadline;
 * fetched, the call was answered after all (and paid), else it stays refused.
 */
async function withKeptResult(
  { gatewayUrl, chain, payer }: { gatewayUrl: string; chain: DevChain; payer: LocalAccount },
  paid: PaidOutcome,
  signal: AbortSignal,
): Promise<PaidOutcome> {
  const { outcome, nonces } = paid;
  const nonce = nonces.at(-1);
  if (outcome.end !== 'refused' || outcome.status < 500 || nonce === undefined) return paid;
  try {
    const { jwt } = await walletToken(gatewayUrl, payer);
    const id = [`eip155:${chain.chainId}`, chain.token.address, payer.address, nonce].join(':').toLowerCase();
    for (let asks = 1; ; asks++) {
      const response = await fetch(`${gatewayUrl}/api/payments/${id}/result`, {
        headers: { authorization: `Bearer ${jwt}` },
        signal,
      });
      await response.body?.cancel();
      if (response.status === 200) {
        const recovered = [`kept result fetched${asks > 1 ? ` (asked ${asks} times)` : ''}`];
        return { outcome: { end: 'answered', status: 200, recovered }, nonces };
      }
      // Still settling (another replica finishes what the dead one began): asked again when told.
      if (response.status !== 409) break;
      await delay(Number(response.headers.get('retry-after') ?? 1) * 1000, undefined, { signal });
    }
  } catch {
    // Not fetched: the call stays refused as it was.
  }
  return paid;
}

/**
 * A paid MCP tool call as examples/pay-over-mcp.mjs makes it, with the official SDK client: an unpaid
 * call refused with JSON-RPC error 402, paid in `_meta`. A request the balancer answered with its
 * JSON error (the SDK throws on any non-2xx) is refused with that error's code; after the payment, its
 * kept result is asked for as over REST.
 */
export async function payOverMcp(options: {
  gatewayUrl: string;
  chain: DevChain;
  payer: LocalAccount;
  message: string;
}): Promise<PaidOutcome> {
  const deadline = AbortSignal.timeout(OPERATION_TIMEOUT_MS);
  return withKeptResult(options, await mcpCall(options, deadline), deadline);
}

async function mcpCall(
  options: { gatewayUrl: string; chain: DevChain; payer: LocalAccount; message: string },
  deadline: AbortSignal,
): Promise<PaidOutcome> {
  const nonces: string[] = [];
  let refusal: Response | undefined;
  const recording = async (url: string | URL, init?: RequestInit) => {
    const signal = init?.signal ? AbortSignal.any([init.signal, deadline]) : deadline;
    const response = await fetch(url, { ...init, signal });
    if (!response.ok) refusal = response.clone();
    return response;
  };
  const client = new Client({ name: 'sigil-scaleout-proof', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${options.gatewayUrl}/mcp/server/probe`), {
    fetch: recording,
  });
  const request = { name: 'echo', arguments: { message: options.message } };
  const requestOptions = { timeout: OPERATION_TIMEOUT_MS, signal: deadline };
  try {
    await client.connect(transport, requestOptions);
    let result: CallToolResult;
    try {
      result = (await client.callTool(request, undefined, requestOptions)) as CallToolResult;
    } catch (error) {
      if (!(error instanceof McpError) || error.code !== 402) throw error;
      const payment = await payingClient(options.chain, options.payer).createPaymentPayload(
        error.data as never,
      );
      nonces.push(nonceOfPayment(payment));
      result = (await client.callTool(
        { ...request, _meta: { [PAYMENT]: payment } },
        undefined,
        requestOptions,
      )) as CallToolResult;
    }
    if (result.isError) return { outcome: { end: 'refused', status: 200, code: 'tool_error' }, nonces };
    return { outcome: { end: 'answered', status: 200 }, nonces };
  } catch (err) {
    if (err instanceof McpError)
      return { outcome: { end: 'refused', status: 200, code: `json-rpc ${err.code}` }, nonces };
    if (refusal && !deadline.aborted) return { outcome: await outcomeOf(refusal), nonces };
    return { outcome: outcomeOfThrown(err, deadline), nonces };
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** One SIWE verification attempt: where it was sent, and its status (0: no connection). */
export interface SiweAttempt {
  at: string;
  status: number;
}

/** A SIWE sign-in of {@link siweSignIn}: how it ended, its nonce, and every verification of it. */
export interface SiweSignIn {
  outcome: Outcome;
  nonce?: string;
  attempts: SiweAttempt[];
  /** The same signed message sent again to each of `urls` (later: after kills and restarts). */
  replay(urls: string[]): Promise<SiweAttempt[]>;
}

/**
 * A SIWE sign-in through the balancer (challenge, signature, verification), and the same signed
 * message replayed at once to every replica of the service directly: at most one may accept it.
 */
export async function siweSignIn(options: {
  /** The service's address at the balancer, and its replicas' own. */
  balancerUrl: string;
  replicaUrls: string[];
  /** `/auth` on the runtime, `/api/auth` on the gateway. */
  prefix: string;
  account: LocalAccount;
}): Promise<SiweSignIn> {
  const deadline = AbortSignal.timeout(OPERATION_TIMEOUT_MS);
  const { balancerUrl, prefix, account } = options;
  const unsent = (outcome: Outcome): SiweSignIn => ({ outcome, attempts: [], replay: async () => [] });
  let message: string;
  try {
    const challenge = await fetch(`${balancerUrl}${prefix}/challenge?address=${account.address}`, {
      signal: deadline,
    });
    if (!challenge.ok) return unsent(await outcomeOf(challenge));
    ({ message } = (await challenge.json()) as { message: string });
  } catch (err) {
    return unsent(outcomeOfThrown(err, deadline));
  }
  const nonce = /^Nonce: (\S+)$/m.exec(message)?.[1];
  const body = JSON.stringify({ message, signature: await account.signMessage({ message }) });
  const verify = (base: string, signal: AbortSignal) =>
    fetch(`${base}${prefix}/verify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      signal,
    });
  /** Verifications sent at once to each of `urls`; their statuses (0: no connection). */
  const replay = async (urls: string[], signal = AbortSignal.timeout(OPERATION_TIMEOUT_MS)) =>
    Promise.all(
      urls.map(async (at) => {
        const response = await verify(at, signal).catch(() => undefined);
        await response?.body?.cancel();
        return { at, status: response?.status ?? 0 };
      }),
    );
  const [through, replayed] = await Promise.all([
    verify(balancerUrl, deadline).then(
      async (response) => ({ status: response.status, outcome: await outcomeOf(response) }),
      (err: unknown) => ({ status: 0, outcome: outcomeOfThrown(err, deadline) }),
    ),
    replay(options.replicaUrls, deadline),
  ]);
  return {
    outcome: through.outcome,
    ...(nonce === undefined ? {} : { nonce }),
    attempts: [{ at: 'balancer', status: through.status }, ...replayed],
    replay,
  };
}

/** A chat message's outcome, its answer's text, and what its tool calls did. */
export interface ChatOutcome {
  outcome: Outcome;
  answer: string;
  /** `<tool>: billed`, `<tool>: free` or `<tool>: error <content>`, one per tool result. */
  tools: string[];
}

/**
 * A wallet that chats with one agent, as examples/first-chat.mjs does, through the balancer. Each of
 * its sign-ins is a session JWT of its own, which the balancer hashes to one runtime replica while
 * that one answers; the agent's chat sessions are each used with one of them ({@link ChatSession}).
 */
export class ChatWallet {
  agentId = '';

  constructor(
    readonly name: string,
    readonly account: PrivateKeyAccount,
    readonly runtimeUrl: string,
  ) {}

  client(jwt: string) {
    return runtimeClient(this.runtimeUrl, jwt);
  }

  /** Signs in (SIWE): a new session JWT. */
  signIn(): Promise<string> {
    return signIn(this.runtimeUrl, this.account);
  }

  /** Stores the stand-in's key in the vault and unlocks it, with this JWT (on the replica it is sent to). */
  storeKey(jwt: string): Promise<void> {
    return storeAndUnlock(this.client(jwt), this.account, 'PROVIDER_API_KEY', 'sk-stand-in');
  }

  /** Unlocks the vault for this JWT's session (on the replica it is sent to), with the wallet's signature. */
  async unlock(jwt: string): Promise<void> {
    const signature = await this.account.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    const unlocked = await this.client(jwt).json('POST', '/wallet/provider-vault/unlock', { signature });
    if (unlocked.status !== 200)
      throw new Error(
        `unlocking the vault of ${this.name}: ${unlocked.status} ${JSON.stringify(unlocked.body)}`,
      );
  }

  /** The agent, on the stand-in model, with a daily budget when given. */
  async openAgent(jwt: string, dailyBudget: bigint | undefined): Promise<void> {
    const agent = await this.client(jwt).json('POST', '/agents', { name: this.name, model: 'sigil-echo' });
    if (agent.status !== 201 && agent.status !== 200)
      throw new Error(`creating the agent of ${this.name}: ${agent.status} ${JSON.stringify(agent.body)}`);
    this.agentId = agent.body.id as string;
    if (dailyBudget !== undefined) await this.setDailyBudget(jwt, dailyBudget);
  }

  async setDailyBudget(jwt: string, daily: bigint | null): Promise<void> {
    const set = await this.client(jwt).json('PUT', `/agents/${this.agentId}/budgets`, {
      daily: daily === null ? null : daily.toString(),
    });
    if (set.status !== 200)
      throw new Error(`budget of ${this.name}: ${set.status} ${JSON.stringify(set.body)}`);
  }

  /** A withdrawal to the wallet itself (`POST /wallet/withdrawals`), under an idempotency key. */
  async withdraw(jwt: string, amount: bigint, idempotencyKey: string): Promise<Outcome> {
    const deadline = AbortSignal.timeout(OPERATION_TIMEOUT_MS);
    try {
      const body = { amount: amount.toString(), idempotencyKey };
      return await outcomeOf(await this.client(jwt).send('POST', '/wallet/withdrawals', body, deadline));
    } catch (err) {
      return outcomeOfThrown(err, deadline);
    }
  }

  /** A chat session of the agent with the probe's tools, used with this JWT. */
  async openSession(jwt: string): Promise<ChatSession> {
    const session = await this.client(jwt).json('POST', `/agents/${this.agentId}/sessions`, {
      servers: ['probe'],
    });
    if (session.status !== 201)
      throw new Error(`opening a session of ${this.name}: ${session.status} ${JSON.stringify(session.body)}`);
    return new ChatSession(this, jwt, session.body.id as string);
  }
}

/**
 * One chat session of a {@link ChatWallet}, its messages one at a time, each recovered as
 * docs/runtime-chat.md ("A lost stream") tells a client to: a stream cut (its replica died, say) is
 * resumed from its last event id on any replica; an answer whose replica died (`answer_lost`) is sent
 * again with the same id; a busy session's running answer is followed; a vault locked on the replica
 * now answering is unlocked again.
 */
export class ChatSession {
  private turn: Promise<unknown> = Promise.resolve();

  constructor(
    readonly wallet: ChatWallet,
    readonly jwt: string,
    readonly id: string,
  ) {}

  /** Sends one message (after the session's previous one ended); `id` makes resending it safe. */
  message(content: string, id: string): Promise<ChatOutcome> {
    const sent = this.turn.then(() => this.send(content, id));
    this.turn = sent.catch(() => undefined);
    return sent;
  }

  private async send(content: string, id: string): Promise<ChatOutcome> {
    const deadline = AbortSignal.timeout(OPERATION_TIMEOUT_MS);
    const recovered: string[] = [];
    const note = (step: string) => {
      if (recovered.at(-1) !== step) recovered.push(step);
    };
    const client = this.wallet.client(this.jwt);
    const messages = `/agents/${this.wallet.agentId}/sessions/${this.id}/messages`;
    /** The events read of the latest attempt at the message, across the resumes of its stream. */
    let events: SseEvent[] = [];
    let resume = false;
    const ended = (outcome: Outcome): ChatOutcome => ({
      outcome,
      answer: events
        .filter((event) => event.event === 'text-delta')
        .map((event) => String(event.data.text))
        .join(''),
      tools: events
        .filter((event) => event.event === 'tool-result')
        .map(({ data }) =>
          data.isError
            ? `${String(data.name)}: error ${String(data.content).slice(0, 120)}`
            : `${String(data.name)}: ${data.billed ? 'billed' : 'free'}`,
        ),
    });
    try {
      for (;;) {
        const lastId = events.findLast((event) => event.id !== undefined)?.id;
        const response = resume
          ? await client.send(
              'GET',
              `${messages}/${id}/events`,
              undefined,
              deadline,
              lastId === undefined ? {} : { 'last-event-id': lastId },
            )
          : await client.send('POST', messages, { content, id }, deadline);
        if (response.ok) {
          if (!resume) events = [];
          const read = await eventsOf(response);
          events.push(...read);
          const error = read.find((event) => event.event === 'error')?.data as ErrorBody | undefined;
          if (error?.details?.reason === 'answer_lost') {
            note('answer lost: sent again with the same id');
            resume = false;
            continue;
          }
          if (error) return ended(refusedWith(200, error, recovered));
          if (read.some((event) => event.event === 'done'))
            return ended({ end: 'answered', status: 200, ...nonEmpty(recovered) });
          note('stream cut: resumed from its last event');
          resume = true;
          continue;
        }
        const outcome = await outcomeOf(response);
        const reason = outcome.end === 'refused' ? outcome.reason : undefined;
        if (reason === 'session_busy' || reason === 'replica_unanswered' || reason === 'replica_timed_out') {
          // Answered elsewhere, or its replica died answering: follow its stored stream.
          note(`${reason}: resumed its stream`);
          resume = true;
          continue;
        }
        if (reason === 'stream_not_found') {
          // Nothing stored of it (yet, or ever): sent again, after a moment.
          note('no stream stored: sent again with the same id');
          resume = false;
          await new Promise((resolve) => setTimeout(resolve, 250));
          continue;
        }
        if (reason === 'vault_locked' && !recovered.includes('vault unlocked again')) {
          recovered.push('vault unlocked again');
          await this.wallet.unlock(this.jwt);
          resume = false;
          continue;
        }
        if (reason === 'message_already_answered')
          return ended({ end: 'answered', status: 409, recovered: [...recovered, reason] });
        return ended(outcome.end === 'refused' ? { ...outcome, ...nonEmpty(recovered) } : outcome);
      }
    } catch (err) {
      return ended(outcomeOfThrown(err, deadline));
    }
  }
}

/** The events of an SSE response to its end, or, cut, those read before the cut. */
async function eventsOf(response: Response): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  // readSse hands each event to `until` as it is parsed: kept here, so a cut does not lose them.
  await readSse(response, (event) => {
    events.push(event);
    return false;
  }).catch(() => undefined);
  return events;
}

const nonEmpty = (recovered: string[]) => (recovered.length > 0 ? { recovered } : {});

function refusedWith(status: number, body: ErrorBody, recovered: string[]): Outcome {
  if (typeof body.code !== 'string') return { end: 'unclear', detail: `an error event without a code` };
  const reason = body.details?.reason;
  return {
    end: 'refused',
    status,
    code: body.code,
    ...(typeof reason === 'string' ? { reason } : {}),
    ...nonEmpty(recovered),
  };
}
