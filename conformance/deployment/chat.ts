import {
  createPublicClient,
  createWalletClient,
  defineChain,
  http,
  parseAbi,
  type Address,
  type Hex,
} from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { z } from 'zod';
import { ensure, excerpt, expectShape, failWith, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import { createAgent, is4xx, offeredModel, quote } from './agents.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectJson } from './expect.ts';
import { parseSse } from './sse.ts';
import { bearer, freshWallet, RUNTIME_AUTH, signIn } from './wallet.ts';

/**
 * Chat (runtime spec part 7: session validation and the missing-key rejection; part 8: the cost
 * formulas). The spec fixes `POST /agents/:id/sessions` and `POST /wallet/provider-vault/unlock` but
 * neither the chat route, the events nor the ledger's routes; these checks use Sigil's (README
 * "Chat", "Provider keys", "Wallet ledger"), so a runtime without them is not applicable through the
 * `runtime-chat` and `runtime-provider-vault` features.
 *
 * A black box cannot know which models a deployment offers: the runner asks for an agent with a model
 * no one offers, and reads the offered ones from the refusal (`details.offered`; agents.ts).
 */

const SPEC_SESSION =
  'runtime spec part 3 (create session: ownership, model and session constraints pass) and part 7 (a session request fails validation when ownership, model or session constraints are not met)';
const SPEC_KEY =
  'runtime spec part 7 (with no provider key stored, the chat request is rejected with guidance on how to store one; the slot is PROVIDER_API_KEY or a provider-specific name)';
const SPEC_COST =
  'runtime spec part 8 (BYOK: platformCost = 0.10 × baseLlmCost + 0.0005 USD × toolCalls, per request) and part 1 (the ledger is charged)';

/** 0.0005 USD at 6 decimals. */
const TOOL_CALL_PRICE = 500n;
/** A key slot as SDKs name their variables: PROVIDER_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY. */
const SLOT = /\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_API_KEY\b/;
const CHAIN_WAIT_MS = 18_000;

const units = z
  .union([z.string().regex(/^-?[0-9]+$/, 'an integer amount in base units'), z.number().int()])
  .transform((value) => BigInt(value));
const idSchema = z.looseObject({ id: z.string().min(1) });
const refusalSchema = z.looseObject({
  message: z.string().optional(),
  hint: z.string().optional(),
  details: z.looseObject({ offered: z.array(z.string()).optional() }).optional(),
});
const costSchema = z.looseObject({
  keyKind: z.string().optional(),
  baseLlmCost: units,
  toolCalls: z.number().int().nonnegative(),
  platformCost: units,
});
const usageSchema = z.looseObject({ baseLlmCost: units });
const transactionsSchema = z.looseObject({
  transactions: z.array(z.looseObject({ kind: z.string(), amount: units, agentId: z.string().nullish() })),
});
const erc20 = parseAbi(['function transfer(address to, uint256 value) returns (bool)']);

interface Who {
  token: string;
  wallet: PrivateKeyAccount;
}

async function who(context: DeploymentContext): Promise<Who> {
  const signedIn = await signIn(context, RUNTIME_AUTH, freshWallet(context));
  return { token: signedIn.token, wallet: signedIn.wallet };
}

function runtime(
  context: DeploymentContext,
  as: Who,
  method: 'GET' | 'POST' | 'PUT',
  path: string,
  json?: unknown,
) {
  return context.http.request({
    service: 'runtime',
    method,
    path,
    headers: bearer(as.token),
    ...(json === undefined ? {} : { json }),
    timeoutMs: 30_000,
  });
}

const openSession = (context: DeploymentContext, as: Who, agentId: string, body: unknown = {}) =>
  runtime(context, as, 'POST', `/agents/${agentId}/sessions`, body);

/** Signs the vault message, stores `apiKey` in `slot` and unlocks, as Sigil's routes take them. */
async function storeKey(context: DeploymentContext, as: Who, slot: string, apiKey: string): Promise<void> {
  const message = expectJson(
    await runtime(context, as, 'GET', '/wallet/provider-vault/message'),
    200,
    z.looseObject({ message: z.string().min(1) }),
    'GET /wallet/provider-vault/message',
  ).message;
  const signature = await as.wallet.signMessage({ message });
  context.secret(signature);
  context.secret(apiKey);
  const stored = await runtime(context, as, 'PUT', `/wallet/provider-vault/keys/${slot}`, {
    apiKey,
    signature,
  });
  ensure(
    stored.status >= 200 && stored.status < 300,
    `PUT /wallet/provider-vault/keys/${slot}: expected a 2xx, got ${stored.status}: ${quote(stored)}`,
  );
  const unlocked = await runtime(context, as, 'POST', '/wallet/provider-vault/unlock', { signature });
  ensure(
    unlocked.status === 200,
    `POST /wallet/provider-vault/unlock: expected HTTP 200, got ${unlocked.status}: ${quote(unlocked)}`,
  );
}

/** Deposits `amount` of the deployment's token to the wallet's deposit address and waits for it to count. */
async function fund(context: DeploymentContext, as: Who, amount: bigint): Promise<void> {
  const { payerKey, rpcUrl } = context.target;
  if (payerKey === undefined || rpcUrl === undefined)
    notApplicableBecause(
      'needs a funded payer (--payer-key) and the chain (--rpc-url) to deposit for a chat',
    );
  const deposit = expectJson(
    await runtime(context, as, 'GET', '/wallet/deposit-address'),
    200,
    z.looseObject({
      address: z.string().regex(/^0x[0-9a-fA-F]{40}$/),
      token: z.looseObject({ address: z.string().regex(/^0x[0-9a-fA-F]{40}$/) }),
    }),
    'GET /wallet/deposit-address',
  );
  const payer = privateKeyToAccount(payerKey as Hex);
  const publicClient = createPublicClient({ transport: http(rpcUrl) });
  const chain = defineChain({
    id: await publicClient.getChainId(),
    name: 'deployment chain',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  const hash = await createWalletClient({ chain, transport: http(rpcUrl), account: payer }).writeContract({
    address: deposit.token.address as Address,
    abi: erc20,
    functionName: 'transfer',
    args: [deposit.address as Address, amount],
  });
  const receipt = await publicClient.waitForTransactionReceipt({ hash });
  ensure(receipt.status === 'success', `the deposit transaction ${hash} reverted`);
  context.evidence.note(`deposited ${amount} base units to ${deposit.address}`, { transaction: hash });
  const deadline = Date.now() + CHAIN_WAIT_MS;
  for (;;) {
    const balance = expectJson(
      await runtime(context, as, 'GET', '/wallet/balance'),
      200,
      z.looseObject({ available: units }),
      'GET /wallet/balance',
    );
    if (balance.available >= amount) return;
    if (Date.now() > deadline) failWith(`the deposit was not counted within ${CHAIN_WAIT_MS / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** ceil((10 × baseLlmCost + 100 × 500 × toolCalls) / 100): README "Chat", Cost. */
export const byokPlatformCost = (base: bigint, toolCalls: number): bigint =>
  (10n * base + 100n * TOOL_CALL_PRICE * BigInt(toolCalls) + 99n) / 100n;

export const chatRequirements: readonly Requirement[] = [
  {
    id: 'RT-7.session-validation',
    level: 'MUST',
    title:
      'POST /agents/:id/sessions opens a session for the agent’s owner with an offered model, and refuses another wallet’s agent (404), a model no provider offers (4xx) and a malformed body (400)',
    spec: SPEC_SESSION,
    service: 'runtime',
    features: ['runtime-wallet-auth', 'runtime-chat'],
    check: async (context) => {
      const owner = await who(context);
      const model = await offeredModel(context, owner.token);
      const agentId = await createAgent(context, owner.token, model);
      const opened = await openSession(context, owner, agentId);
      ensure(
        opened.status === 201 || opened.status === 200,
        `the owner's POST /agents/:id/sessions with the offered model ${model}: expected HTTP 201, got ${opened.status}: ${quote(opened)}`,
      );
      const other = await who(context);
      const stolen = await openSession(context, other, agentId);
      ensure(
        stolen.status === 404,
        `another wallet's POST /agents/:id/sessions for the agent: expected HTTP 404, got ${stolen.status}`,
      );
      const bodies: [string, unknown][] = [
        ['servers not a list', { servers: 'probe' }],
        ['a server id with spaces and capitals', { servers: ['Not A Server Id'] }],
        ['an unknown field', { conformanceUnknownField: true }],
        ['a system prompt that is not a string', { system: 42 }],
      ];
      for (const [what, body] of bodies) {
        const response = await openSession(context, owner, agentId, body);
        ensure(
          response.status === 400,
          `POST /agents/:id/sessions with ${what} (${JSON.stringify(body)}): expected HTTP 400, got ${response.status}`,
        );
      }
      return pass();
    },
  },
  {
    id: 'RT-7.missing-key-guidance',
    level: 'MUST',
    title:
      'A chat by a wallet with no provider key stored is refused (4xx) with a hint that names the key slot (PROVIDER_API_KEY or a provider’s own, such as OPENAI_API_KEY); a key stored in that slot lifts the refusal',
    spec: SPEC_KEY,
    service: 'runtime',
    features: ['runtime-wallet-auth', 'runtime-chat', 'runtime-provider-vault'],
    check: async (context) => {
      const as = await who(context);
      const model = await offeredModel(context, as.token);
      const agentId = await createAgent(context, as.token, model);
      const opened = await openSession(context, as, agentId);
      ensure(
        opened.status === 201 || opened.status === 200,
        `POST /agents/:id/sessions: got ${opened.status}`,
      );
      const sessionId = expectJson(opened, opened.status, idSchema, 'POST /agents/:id/sessions').id;
      const path = `/agents/${agentId}/sessions/${sessionId}/messages`;
      const refused = await runtime(context, as, 'POST', path, { content: 'hello' });
      if (refused.status === 200 && /"keyKind":\s*"internal"/.test(refused.text))
        notApplicableBecause(
          'the deployment answers a wallet without a key on its internal key (runtime.chat.internalKey)',
        );
      ensure(
        is4xx(refused),
        `a chat by a wallet with no provider key stored: expected a refusal (HTTP 4xx), got ${refused.status}`,
      );
      const body = expectShape(refusalSchema, refused.body ?? {}, 'the refusal of a chat without a key');
      ensure(
        body.hint !== undefined && body.hint.trim() !== '',
        `the refusal of a chat without a key has no hint on how to store one: ${quote(refused)}`,
      );
      const slot = SLOT.exec(body.hint)?.[0];
      ensure(
        slot !== undefined,
        `the refusal's hint names no key slot (PROVIDER_API_KEY, OPENAI_API_KEY, …): "${excerpt(body.hint, 200)}"`,
      );
      context.evidence.note(`the hint names the slot ${slot}`);
      await storeKey(context, as, slot, `sk-conformance-${Date.now()}`);
      const after = await runtime(context, as, 'POST', path, { content: 'hello' });
      const again = is4xx(after)
        ? expectShape(refusalSchema, after.body ?? {}, 'the answer with a key stored')
        : undefined;
      ensure(
        again === undefined || again.hint !== body.hint,
        `with a key stored in ${slot} and the vault unlocked, the chat is still refused with the same hint (HTTP ${after.status})`,
      );
      return pass();
    },
  },
  {
    id: 'RT-8.cost-formula-byok',
    level: 'MUST',
    title:
      'A chat on the wallet’s own key reports platformCost = ceil(0.10 × baseLlmCost + 500 × toolCalls) base units in its cost event, baseLlmCost the sum of its usage events, and the ledger is charged that amount once',
    spec: SPEC_COST,
    service: 'runtime',
    features: ['runtime-wallet-auth', 'runtime-chat', 'runtime-provider-vault', 'runtime-ledger'],
    check: async (context) => {
      const as = await who(context);
      const model = await offeredModel(context, as.token);
      const balance = expectJson(
        await runtime(context, as, 'GET', '/wallet/balance'),
        200,
        z.looseObject({ minimumBalance: units.optional() }),
        'GET /wallet/balance',
      );
      const minimum =
        balance.minimumBalance && balance.minimumBalance > 0n ? balance.minimumBalance : 10_000n;
      await fund(context, as, 2n * minimum);
      await storeKey(context, as, 'PROVIDER_API_KEY', `sk-conformance-${Date.now()}`);
      const agentId = await createAgent(context, as.token, model);
      const opened = await openSession(context, as, agentId);
      ensure(
        opened.status === 201 || opened.status === 200,
        `POST /agents/:id/sessions: got ${opened.status}`,
      );
      const sessionId = expectJson(opened, opened.status, idSchema, 'POST /agents/:id/sessions').id;
      const chat = await runtime(context, as, 'POST', `/agents/${agentId}/sessions/${sessionId}/messages`, {
        content: 'hello from the conformance runner',
      });
      ensure(
        chat.status === 200,
        `the chat: expected HTTP 200 (an SSE stream), got ${chat.status}: ${quote(chat)}`,
      );
      const events = parseSse(chat.text);
      const costs = events.filter((e) => e.event === 'cost');
      ensure(costs.length === 1, `the stream has ${costs.length} cost events, not one`);
      const cost = expectShape(costSchema, costs[0]?.data, 'the cost event');
      if (cost.keyKind !== undefined)
        ensure(cost.keyKind === 'byok', `the cost event says keyKind "${cost.keyKind}", not "byok"`);
      const usages = events
        .filter((e) => e.event === 'usage')
        .map((e) => expectShape(usageSchema, e.data, 'a usage event').baseLlmCost);
      const summed = usages.reduce((a, b) => a + b, 0n);
      ensure(
        usages.length > 0 && summed === cost.baseLlmCost,
        `the usage events' baseLlmCost sum to ${summed} (${usages.length} events), the cost event says ${cost.baseLlmCost}`,
      );
      // A call counts when the gateway ran it (a tool-result that is not `billed: false`): a call
      // refused before it ran, or that failed, is not charged.
      const calls = events.filter(
        (e) => e.event === 'tool-result' && (e.data as { billed?: unknown }).billed !== false,
      ).length;
      ensure(
        calls === cost.toolCalls,
        `the stream shows ${calls} tool calls the gateway ran, the cost event says ${cost.toolCalls}`,
      );
      const expected = byokPlatformCost(cost.baseLlmCost, cost.toolCalls);
      ensure(
        cost.platformCost === expected,
        `the cost event says platformCost ${cost.platformCost}, but ceil(0.10 × ${cost.baseLlmCost} + 500 × ${cost.toolCalls}) = ${expected}`,
      );
      const charges = expectJson(
        await runtime(context, as, 'GET', '/wallet/transactions'),
        200,
        transactionsSchema,
        'GET /wallet/transactions',
      ).transactions.filter((t) => t.kind === 'charge');
      ensure(
        charges.length === 1,
        `the ledger shows ${charges.length} charges after one chat message, not one`,
      );
      ensure(
        charges[0]?.amount === expected,
        `the ledger charged ${charges[0]?.amount}, but the chat's platformCost is ${expected}`,
      );
      return pass();
    },
  },
];
