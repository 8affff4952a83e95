/**
 * What the `reflect` suite measures against: the runtime as the tests compose it (Sigil's test Stack:
 * a real kernel on a fresh SQLite file or PostgreSQL schema, the runtime app on an ephemeral port,
 * quiet logs) with `provider-local`, whose stand-in answers the pipeline's calls; the chat history
 * sealed under a data key, as in production. Each wallet signs in (SIWE), is funded on its ledger,
 * stores and unlocks its BYOK key, owns an agent on `sigil-echo`, and has chat sessions stored
 * through the chat's own ConversationStore (the statements a chat turn's end writes).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LlmMessage } from '@sigil/plugin-api';
import type { PrivateKeyAccount } from 'viem/accounts';
import type { LocalProvider, StandIn } from '../providers/local/index.ts';
import type { ProviderEntry } from '../services/runtime/chat/chat.ts';
import { newWallet } from '../test/core/auth/support.ts';
import { runtimeClient, storeAndUnlock } from '../test/services/runtime/chat-support.ts';
import { setOnChain } from '../test/services/runtime/ledger/support.ts';
import { pluginsWithLocalProvider, Stack } from '../test/services/runtime/support.ts';
import type { TestDatabase } from '../test/support/kernel.ts';

export const MODEL = 'sigil-echo';
/** The wallet's own key (BYOK): the stand-in takes any key. */
const API_KEY = 'sk-bench-reflect-own-key';
const USD = 1_000_000n;

export interface ReflectWorld {
  stack: Stack;
  standIn: StandIn;
  /** The provider serving MODEL, as the pipeline finds it. */
  entry: ProviderEntry;
  apiKey: string;
  close(): Promise<void>;
}

/** A wallet of the world: signed in, funded, its key unlocked in its session, with one agent. */
export interface ReflectUser {
  wallet: PrivateKeyAccount;
  client: ReturnType<typeof runtimeClient>;
  agentId: string;
}

export async function openReflectWorld(
  database: TestDatabase,
  selfImprovement: Record<string, unknown>,
): Promise<ReflectWorld> {
  const dir = mkdtempSync(join(tmpdir(), 'sigil-bench-reflect-'));
  const stack = await Stack.start({
    database,
    config: {
      vault: { persistenceDir: dir },
      runtime: {
        history: { dataKeys: [{ id: 'bench', key: randomBytes(32).toString('base64') }] } as never,
        selfImprovement: selfImprovement as never,
      },
      plugins: pluginsWithLocalProvider(),
    },
  }).catch((err: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  });
  const close = async () => {
    await stack.close();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const standIn = (stack.kernel.plugins.all('llm-provider')[0] as LocalProvider).standIn;
    if (!standIn) throw new Error('the provider-local stand-in is not running');
    const entry = await stack.runtime.chat.providerFor(MODEL);
    if (!entry) throw new Error(`${MODEL} is not offered`);
    return { stack, standIn, entry, apiKey: API_KEY, close };
  } catch (err) {
    await close();
    throw err;
  }
}

export async function newReflectUser(world: ReflectWorld): Promise<ReflectUser> {
  const { stack } = world;
  const wallet = newWallet();
  const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
  await setOnChain(stack.runtime.ledger.ledger, wallet.address, 1000n * USD);
  await storeAndUnlock(client, wallet, world.entry.provider.keySlot, world.apiKey);
  const agent = await client.json('POST', '/agents', { name: 'bench', model: MODEL });
  if (agent.status !== 201) throw new Error(`POST /agents: ${agent.status} ${JSON.stringify(agent.body)}`);
  return { wallet, client, agentId: agent.body.id as string };
}

/**
 * Stores the sessions numbered `from` to `to - 1` of the user (see `conversation`), each opened,
 * answered request by request and closed, as the chat does; their ids.
 */
export async function storeSessions(
  world: ReflectWorld,
  user: ReflectUser,
  from: number,
  to: number,
): Promise<string[]> {
  const history = world.stack.runtime.history;
  const ids: string[] = [];
  for (let n = from; n < to; n++) {
    const session = await history.create(
      {
        wallet: user.wallet.address,
        agentId: user.agentId,
        model: MODEL,
        provider: world.entry.name,
        servers: [],
        system: undefined,
      },
      1000,
    );
    if ('full' in session) throw new Error('the agent has too many open sessions');
    for (const [turn, added] of conversation(n).entries())
      // A request's cost is what the chat charged for it; the pipeline does not read it.
      await history.append(
        session,
        `bench-${n}-${turn}`,
        (await history.claim(session.id, { touch: false })).id,
        added,
        0n,
        { fresh: false },
      );
    await history.end(session, 'closed');
    ids.push(session.id);
  }
  return ids;
}

const QUESTIONS: [string, string][] = [
  [
    'How warm will it be in Lisbon this weekend, and should I pack a jacket for the evenings?',
    'Lisbon should reach about 24 °C in the afternoons on Saturday and Sunday, with a light wind from the Atlantic. Evenings cool down to around 16 °C, especially near the river, so a light jacket or a sweater is worth packing. Rain is unlikely; sunscreen is a better bet than an umbrella.',
  ],
  [
    'Can you suggest a quick vegetarian dinner I can make with chickpeas, spinach and some rice?',
    'Try a chickpea and spinach curry: fry an onion with garlic, ginger and curry powder, add a tin of chickpeas and a tin of chopped tomatoes, simmer ten minutes, stir in two handfuls of spinach until it wilts, and finish with lemon juice. Serve it over rice; it takes about 25 minutes in all.',
  ],
  [
    'What is the best way to get from Munich airport to the city centre late at night?',
    'The S-Bahn lines S1 and S8 run to the centre until about 1 a.m. and take 40 minutes; a single ticket for the airport zone costs 13 euros. After that, the night bus N40 goes to the main station, or a taxi takes 35 minutes and costs around 90 euros.',
  ],
  [
    'Please review this function that parses dates from our CSV exports and tell me what could break.',
    'Three things could break: it assumes day-first dates, so a US export would swap days and months; it ignores time zones, so rows written near midnight land on the wrong day; and it returns an invalid date instead of failing on empty cells. Parse with an explicit format and reject what does not match.',
  ],
  [
    'Summarize the main points of the quarterly sales meeting notes I pasted yesterday.',
    'Revenue grew 8 percent on the quarter, driven by the two new enterprise accounts; churn in the small business segment rose to 3 percent; the team wants a second support hire before the autumn launch; and the pricing review moves to next quarter. The open action is the forecast update due on Friday.',
  ],
  [
    'How long should I rest between interval sessions when training for a half marathon?',
    'Leave at least 48 hours between two hard interval sessions, with easy runs or rest days in between. Within a session, rest about as long as each interval lasts for 400 to 800 metre repeats, and half as long for longer ones. Two quality sessions a week is plenty for most runners.',
  ],
  [
    'Explain the difference between a Roth IRA and a traditional IRA in plain words.',
    'With a traditional IRA you get the tax break now: contributions may be deductible, and you pay income tax when you withdraw in retirement. With a Roth IRA you pay the tax now and withdrawals in retirement are tax free. Roth suits you if you expect a higher tax rate later.',
  ],
  [
    'Draft a polite reply to a customer who asked for a refund after the return window closed.',
    'Thank you for reaching out, and I am sorry the product did not work out for you. Our return window closed on the 14th, so we cannot offer a refund, but we would be glad to give you store credit for the full amount or help you exchange it for another size. Just reply and we will arrange it.',
  ],
];

const FOLLOW_UPS: [string, string][] = [
  [
    'Thanks. Can you make that a bit shorter?',
    'In short: the main point stands, with the details trimmed to what you need to act on today.',
  ],
  [
    'What would you change if it had to be done in half the time?',
    'Drop the optional steps, do the two longest parts in parallel, and accept a rougher result on the details that nobody will check.',
  ],
  [
    'Good. Give me one more option, please.',
    'Another option is to start from the simplest version that works and improve it only where it matters; it costs less and leaves room to change course.',
  ],
];

/** What the stand-in's rules turn into preferences, corrections and goals (docs/self-improvement.md). */
const PREFERENCES = [
  'Always answer in metric units.',
  'Never use emoji in your answers.',
  'From now on keep answers under 150 words.',
  'Please always cite where a number comes from.',
  "Don't suggest paid tools unless I ask.",
  'Always write dates as YYYY-MM-DD.',
];
const CORRECTIONS: [string, string][] = [
  [
    'No, always answer in metric units. I do not use Fahrenheit.',
    'Understood: Celsius, kilometres and kilograms from here on.',
  ],
  ['Actually, never round the figures in a summary.', 'Noted: the figures stay exact, with their decimals.'],
];
const GOALS = [
  'I want to run a half marathon in under two hours by October.',
  'My goal is to cook at home five days a week.',
];

/** Recurring tasks done with tools: the same sequence in two or more sessions makes a skill. */
const TASKS: { ask: string; tools: [string, Record<string, unknown>, string][]; answer: string }[] = [
  {
    ask: "Fetch this week's sales figures and send the weekly report to the team, like every Monday.",
    tools: [
      ['fetch_sales_figures', { week: 'current' }, '{"revenue":184250,"orders":1312,"returns":41}'],
      ['send_weekly_report', { to: 'sales-team' }, '{"sent":true,"recipients":9}'],
    ],
    answer:
      'Done: revenue 184,250 on 1,312 orders with 41 returns, and the weekly report went to the 9 people of the sales team.',
  },
  {
    ask: 'Search flights to Berlin for the conference and book the hotel near the venue, as usual.',
    tools: [
      ['search_flights', { to: 'BER', date: '2026-05-12' }, '{"cheapest":{"flight":"LH 1933","price":214}}'],
      ['book_hotel', { near: 'Messe Berlin', nights: 3 }, '{"booked":true,"hotel":"Hotel am Messedamm"}'],
    ],
    answer:
      'The cheapest flight is LH 1933 at 214 euros, and three nights are booked at the Hotel am Messedamm next to the venue.',
  },
];

/**
 * Session `n`'s requests, each what one answered chat request stores (its user message, then the
 * model's turns and tool results): a question answered, then two more requests. About one session in
 * four states a preference, one in five corrects the agent, one in ten states a goal, and one in three
 * has a recurring task done with two tools (one in ten of those with the second tool failing).
 */
export function conversation(n: number): LlmMessage[][] {
  const [question, answer] = QUESTIONS[n % QUESTIONS.length] as [string, string];
  const preference = n % 4 === 1 ? ` ${PREFERENCES[Math.floor(n / 4) % PREFERENCES.length]}` : '';
  const goal = n % 10 === 7 ? `${GOALS[Math.floor(n / 10) % GOALS.length]} ` : '';
  const requests: LlmMessage[][] = [
    [
      { role: 'user', content: `${goal}${question}${preference}` },
      { role: 'assistant', content: answer },
    ],
  ];
  const [followUp, followAnswer] = (
    n % 5 === 2 ? CORRECTIONS[Math.floor(n / 5) % CORRECTIONS.length] : FOLLOW_UPS[n % FOLLOW_UPS.length]
  ) as [string, string];
  requests.push([
    { role: 'user', content: followUp },
    { role: 'assistant', content: followAnswer },
  ]);
  if (n % 3 === 0) {
    const task = TASKS[Math.floor(n / 3) % TASKS.length] as (typeof TASKS)[number];
    const fails = n % 30 === 0;
    const messages: LlmMessage[] = [{ role: 'user', content: task.ask }];
    for (const [index, [name, input, result]] of task.tools.entries()) {
      const id = `call_${n}_${index}`;
      const failed = fails && index === task.tools.length - 1;
      messages.push({ role: 'assistant', content: '', toolCalls: [{ id, name, input }] });
      messages.push({
        role: 'tool',
        toolCallId: id,
        content: failed ? '{"error":"upstream timed out"}' : result,
        ...(failed ? { isError: true } : {}),
      });
    }
    messages.push({
      role: 'assistant',
      content: fails
        ? 'The figures are fetched, but sending the report failed: the mail service timed out.'
        : task.answer,
    });
    requests.push(messages);
  } else {
    const [more, moreAnswer] = FOLLOW_UPS[(n + 1) % FOLLOW_UPS.length] as [string, string];
    requests.push([
      { role: 'user', content: more },
      { role: 'assistant', content: moreAnswer },
    ]);
  }
  return requests;
}
