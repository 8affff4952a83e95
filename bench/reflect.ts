/**
 * `reflect`: what the self-improvement pipeline costs per stored chat session (LLM calls, tokens, the
 * ledger's charge, time), against reading the same sessions from the chat store alone, in the same run.
 *
 * One process holds everything (bench/reflect-world.ts): the runtime as the tests compose it, with the
 * chat history sealed under a data key, `provider-local` whose stand-in answers the pipeline's calls
 * through the OpenAI wire, and per round a fresh wallet (signed in, 1000 USD on its ledger, its own key
 * stored and unlocked in its session, one agent) with BENCH_REFLECT_SESSIONS (100) sessions stored
 * through the chat's ConversationStore: three requests each, some stating preferences, corrections
 * or goals, one in three a recurring task done with two tools. SQLite (a fresh file), then PostgreSQL
 * (a fresh schema in BENCH_DATABASE_URL, else TEST_DATABASE_URL, else a local `test` database; left
 * out with a note when unreachable, or when BENCH_REFLECT_DATABASES=sqlite).
 *
 * - run: `POST /wallet/self-improvement/trigger` as the wallet's signed-in session, to the run's end
 *   (the scheduler has no run left: facets stored, learnings and skills applied, the run recorded).
 *   One extraction call a session and one synthesis call, each budget-checked on the run's hold for
 *   the agent; one charge for the run (the wallet has one agent).
 * - floors: the same sessions read as the pipeline reads them (the chat store's pending sessions,
 *   each one's messages unsealed, its transcript lines), no model call; and those reads with the
 *   same model calls made straight to the provider (`streamTurn`: no hold, no charge, no memory
 *   write; the synthesis given the facets the extraction answered, and no existing learning).
 * - incremental: BENCH_REFLECT_NEW_SESSIONS (10) more sessions stored, then a second run (the
 *   watermarks: only those are read and extracted), against the floors of those sessions; then a
 *   third run with nothing new (no model call, nothing charged).
 *
 * LLM calls are the stand-in's answered requests counted at its listener, and checked against the
 * run's record; the ledger's charge entries are one per run that made a call (its agent's, under
 * `reflect:<runId>:<attempt>:<agentId>`); tokens are the provider's usage parts as the run recorded
 * them, checked against the ledger's charge (sigil-echo: 1 base unit an input token, 2 an output
 * token, BYOK charged 10 % of that, rounded up once a run). A stand-in token is a
 * whitespace-separated word (a real tokenizer counts some 1.3 tokens a word of English).
 *
 * BENCH_RUNS rounds (3) after a smaller warm-up round, the scenarios in a turning order; rows are
 * medians over rounds (p99: the slowest round), the `added` rows medians of the paired per-round
 * differences. "server CPU" is this whole process's CPU a session (runtime, database threads,
 * stand-in, client); the JSON adds the main thread's, the statements a session and the load.
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { describeUrl } from '../core/db/database.ts';
import { asText } from '../services/runtime/ledger/amounts.ts';
import {
  schemaInstruction,
  streamTurn,
  structuredAnswer,
  type StreamedTurn,
} from '../services/runtime/chat/held-turn.ts';
import { transcriptOf } from '../services/runtime/reflect/engine.ts';
import { historySource } from '../services/runtime/reflect/history-source.ts';
import {
  FACETS_SCHEMA,
  FACETS_SYSTEM,
  LEARNINGS_SCHEMA,
  LEARNINGS_SYSTEM,
} from '../services/runtime/reflect/prompts.ts';
import { postgresTestDatabase, TEST_DATABASES, type TestDatabase } from '../test/support/kernel.ts';
import { POSTGRES_URL, postgresReachable } from './postgres.ts';
import { mainThreadCpuUs, ownCpuUs, profiled } from './proc.ts';
import {
  newReflectUser,
  openReflectWorld,
  storeSessions,
  type ReflectUser,
  type ReflectWorld,
} from './reflect-world.ts';
import { counted, log, median, ms, pairedMedian, rotated, type BenchRow } from './stats.ts';

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const SESSIONS = Number(process.env.BENCH_REFLECT_SESSIONS ?? 100);
const NEW_SESSIONS = Number(process.env.BENCH_REFLECT_NEW_SESSIONS ?? 10);
const DATABASES = (process.env.BENCH_REFLECT_DATABASES ?? 'sqlite,postgres').split(',');
const WARMUP_SESSIONS = 20;
/** One run reads every stored session (the default, 50, would leave half of them to a next run). */
const SELF_IMPROVEMENT = { maxSessionsPerRun: 1000 };
/** 1 USD in the ledger's base units. */
const USD = 1_000_000;

export interface ReflectMeasurement extends BenchRow {
  llmCallsPerSession?: number;
  inputTokensPerSession?: number;
  outputTokensPerSession?: number;
  /** Base units charged a session (1 USD = 1_000_000). */
  chargedPerSession?: number;
  /** Characters sent to and received from the model a session (the calls floors). */
  inputCharsPerSession?: number;
  outputCharsPerSession?: number;
  runs?: Sample[];
}

/** One round of a scenario. */
interface Sample {
  /** The sessions it read (per-session figures are of these). */
  sessions: number;
  totalMs: number;
  msPerSession: number;
  cpuUsPerSession: number;
  mainThreadCpuUsPerSession: number;
  statementsPerSession: number;
  /** Requests the stand-in answered meanwhile. */
  llmCalls: number;
  inputTokens: number;
  outputTokens: number;
  /** Base units the ledger charged for it (runs only). */
  charged: number;
  /** Characters of the model calls' messages and answers (the calls floors only: the same transcripts as the run's). */
  inputChars: number;
  outputChars: number;
  facets: number;
  learnings: number;
  skills: number;
  loadAverage1m: number;
}

type ScenarioKey = 'read' | 'calls' | 'run' | 'read-new' | 'calls-new' | 'run-new' | 'idle';

/** What a scenario tells beyond its time: tokens, and for a run what the run recorded. */
interface Told {
  inputTokens: number;
  outputTokens: number;
  inputChars?: number;
  outputChars?: number;
  charged?: number;
  facets?: number;
  learnings?: number;
  skills?: number;
}

/** A scenario's work; what it resolves to is its check, made after the timing. */
type Work = () => Promise<() => Promise<Told>>;

async function measure(world: ReflectWorld, name: string, sessions: number, work: Work): Promise<Sample> {
  const cpu = ownCpuUs();
  const mainCpu = mainThreadCpuUs();
  const served = world.standIn.stats().served;
  const started = performance.now();
  const { result: check, statements } = await counted(world.stack.kernel.db, () => profiled(name, work));
  const totalMs = performance.now() - started;
  const cpuUs = ownCpuUs() - cpu;
  const mainCpuUs = mainThreadCpuUs() - mainCpu;
  const llmCalls = world.standIn.stats().served - served;
  // What the scenario checks after its end (the run's record, the ledger) is outside its time.
  const told = await check();
  const per = Math.max(sessions, 1);
  return {
    sessions,
    totalMs: ms(totalMs),
    msPerSession: ms(totalMs / per),
    cpuUsPerSession: Math.round(cpuUs / per),
    mainThreadCpuUsPerSession: Math.round(mainCpuUs / per),
    statementsPerSession: Number((statements / per).toFixed(2)),
    llmCalls,
    charged: 0,
    inputChars: 0,
    outputChars: 0,
    facets: 0,
    learnings: 0,
    skills: 0,
    ...told,
    loadAverage1m: Number((loadavg()[0] ?? 0).toFixed(2)),
  };
}

/** The user's sessions (all, or those of `only`) and their transcripts, read as the pipeline reads them. */
async function readTranscripts(world: ReflectWorld, user: ReflectUser, only?: ReadonlySet<string>) {
  const wallet = user.wallet.address;
  const source = historySource(world.stack.runtime.history);
  const { maxTranscriptChars } = world.stack.kernel.config.runtime.selfImprovement;
  const read: { sessionId: string; transcript: string }[] = [];
  for (const session of await source.sessions(wallet)) {
    if (only && !only.has(session.id)) continue;
    const messages = await source.messages(wallet, session.id, 0);
    read.push({ sessionId: session.id, transcript: transcriptOf(messages, maxTranscriptChars) });
  }
  return read;
}

/** The read floor: its tokens are none. */
async function readFloor(world: ReflectWorld, user: ReflectUser, only?: ReadonlySet<string>) {
  await readTranscripts(world, user, only);
  return () => Promise.resolve({ inputTokens: 0, outputTokens: 0 });
}

/** The reads and the pipeline's model calls straight to the provider: no hold, charge or memory write. */
async function callsFloor(world: ReflectWorld, user: ReflectUser, only?: ReadonlySet<string>) {
  const used = { inputTokens: 0, outputTokens: 0, inputChars: 0, outputChars: 0 };
  const ask = async (system: string, text: string, schema: Record<string, unknown>) => {
    const turn: StreamedTurn = { text: '', inputTokens: 0, outputTokens: 0, baseLlmCost: 0n };
    const instructions = `${system}\n\n${schemaInstruction(schema)}`;
    await streamTurn(
      {
        entry: world.entry,
        apiKey: world.apiKey,
        messages: [
          { role: 'system', content: instructions },
          { role: 'user', content: text },
        ],
        maxOutputTokens: world.stack.kernel.config.runtime.selfImprovement.maxOutputTokens,
      },
      turn,
    );
    used.inputTokens += turn.inputTokens;
    used.outputTokens += turn.outputTokens;
    used.inputChars += instructions.length + text.length;
    used.outputChars += turn.text.length;
    return structuredAnswer(turn.text, schema);
  };
  const facets: { id: string; kind: string; statement: string; sessionId: string }[] = [];
  for (const { sessionId, transcript } of await readTranscripts(world, user, only)) {
    const answer = (await ask(FACETS_SYSTEM, transcript, FACETS_SCHEMA)) as {
      facets: { kind: string; statement: string }[];
    };
    for (const [index, { kind, statement }] of answer.facets.entries())
      facets.push({ id: `${sessionId}.${index}`, kind, statement, sessionId });
  }
  await ask(LEARNINGS_SYSTEM, JSON.stringify({ learnings: [], facets }), LEARNINGS_SCHEMA);
  return () => Promise.resolve(used);
}

/** The wallet's charges by the pipeline so far: how many, their sum in base units, and how many are `runId`'s. */
async function reflectCharges(world: ReflectWorld, user: ReflectUser, runId?: string) {
  const db = world.stack.kernel.db;
  const rows = (await db('ledger_entries')
    .where({ wallet: user.wallet.address, kind: 'charge' })
    .andWhere('idempotency_key', 'like', 'charge:reflect:%')
    .select('idempotency_key', asText(db, 'amount'))) as { idempotency_key: string; amount: string }[];
  return {
    count: rows.length,
    sum: rows.reduce((total, row) => total + BigInt(row.amount), 0n),
    ofRun: rows.filter((row) => row.idempotency_key === `charge:reflect:${runId}:1:${user.agentId}`).length,
  };
}

/**
 * A run as the wallet starts it: `POST /wallet/self-improvement/trigger`, to the scheduler's end of
 * it. The check after: the run succeeded over `expected` sessions; the stand-in's requests and the
 * run's recorded calls agree; the ledger has one new charge entry, the run's (none when it made no
 * call), of the recorded `charged`, which is the wallet's unsettled spend's move and what the
 * recorded tokens cost.
 */
async function pipelineRun(world: ReflectWorld, user: ReflectUser, expected: number) {
  const ledger = world.stack.runtime.ledger.ledger;
  const [chargesBefore, balanceBefore, served] = [
    await reflectCharges(world, user),
    await ledger.balance(user.wallet.address),
    world.standIn.stats().served,
  ];
  const trigger = await user.client.json('POST', '/wallet/self-improvement/trigger', {});
  if (trigger.status !== 202) throw new Error(`trigger: ${trigger.status} ${JSON.stringify(trigger.body)}`);
  await world.stack.runtime.reflect.scheduler.settled();
  return async (): Promise<Told> => {
    const calls = world.standIn.stats().served - served;
    // The wallet's few runs (a round's three): the test clock stands still, so they share a createdAt.
    const history = await user.client.json('GET', '/wallet/self-improvement/history?limit=10');
    const runs = (history.body.runs ?? []) as {
      id: string;
      status: string;
      outcome: { sessions: number; facets: number; learnings: number; skills: number };
      cost: { llmCalls: number; inputTokens: number; outputTokens: number; charged: string };
    }[];
    const run = runs.find((each) => each.id === trigger.body.run?.id);
    if (run?.status !== 'succeeded') throw new Error(`the run did not succeed: ${JSON.stringify(run)}`);
    const charges = await reflectCharges(world, user, run?.id);
    const balance = await ledger.balance(user.wallet.address);
    const charged = charges.sum - chargesBefore.sum;
    const { outcome, cost } = run;
    // sigil-echo's price is 1 base unit an input token and 2 an output one; BYOK charges 10 % of the
    // run's, rounded up once: between a tenth of the whole and that plus one.
    const tenth = (cost.inputTokens + 2 * cost.outputTokens) / 10;
    const entries = charges.count - chargesBefore.count;
    const problems = [
      outcome.sessions !== expected && `read ${outcome.sessions} sessions, not ${expected}`,
      cost.llmCalls !== calls && `recorded ${cost.llmCalls} calls, the stand-in answered ${calls}`,
      entries !== (calls > 0 ? 1 : 0) && `${entries} charge entries for a run of ${calls} calls`,
      charges.ofRun !== entries && `${entries} new charge entries, ${charges.ofRun} under the run's key`,
      BigInt(cost.charged) !== charged && `recorded ${cost.charged} charged, the ledger ${charged}`,
      balance.unsettledSpend - balanceBefore.unsettledSpend !== charged &&
        `unsettled spend moved by ${balance.unsettledSpend - balanceBefore.unsettledSpend}, not ${charged}`,
      (Number(charged) < tenth || Number(charged) >= tenth + 1) &&
        `${charged} charged for ${cost.inputTokens} input and ${cost.outputTokens} output tokens`,
    ].filter(Boolean);
    if (problems.length > 0) throw new Error(`reflect bench: ${problems.join('; ')}`);
    return {
      inputTokens: cost.inputTokens,
      outputTokens: cost.outputTokens,
      charged: Number(charged),
      facets: outcome.facets,
      learnings: outcome.learnings,
      skills: outcome.skills,
    };
  };
}

/** One round on a fresh wallet: its sessions stored, then each scenario once; its samples. */
async function round(world: ReflectWorld, database: string, index: number, sessions: number, added: number) {
  const user = await newReflectUser(world);
  await storeSessions(world, user, 0, sessions);
  const samples = new Map<ScenarioKey, Sample>();
  const run = async (key: ScenarioKey, count: number, work: Work) => {
    const sample = await measure(world, `reflect-${database}-${key}-${index}`, count, work);
    samples.set(key, sample);
    log({ database, round: index, scenario: key, ...sample });
  };
  const first: [ScenarioKey, Work][] = [
    ['read', () => readFloor(world, user)],
    ['calls', () => callsFloor(world, user)],
    ['run', () => pipelineRun(world, user, sessions)],
  ];
  for (const [key, work] of rotated(first, index)) await run(key, sessions, work);
  const fresh = new Set(await storeSessions(world, user, sessions, sessions + added));
  const next: [ScenarioKey, Work][] = [
    ['read-new', () => readFloor(world, user, fresh)],
    ['calls-new', () => callsFloor(world, user, fresh)],
    ['run-new', () => pipelineRun(world, user, added)],
  ];
  for (const [key, work] of rotated(next, index)) await run(key, added, work);
  await run('idle', 0, () => pipelineRun(world, user, 0));
  return samples;
}

/** Every round on one database; its rows. */
async function databaseRows(name: string, database: TestDatabase): Promise<ReflectMeasurement[]> {
  const world = await openReflectWorld(database, SELF_IMPROVEMENT);
  try {
    // The first runs of every path (V8 compiling, the first statements prepared) outside the rounds.
    await round(world, name, -1, WARMUP_SESSIONS, Math.min(NEW_SESSIONS, 5));
    const samples = new Map<ScenarioKey, Sample[]>();
    for (let index = 0; index < RUNS; index++)
      for (const [key, sample] of await round(world, name, index, SESSIONS, NEW_SESSIONS))
        samples.set(key, [...(samples.get(key) ?? []), sample]);
    return rows(name, samples);
  } finally {
    await world.close();
  }
}

export async function reflectSuite(): Promise<ReflectMeasurement[]> {
  const sqlite = TEST_DATABASES[0];
  if (!sqlite) throw new Error('no test database');
  const measurements = await databaseRows('sqlite', sqlite);
  if (!DATABASES.includes('postgres')) return measurements;
  if (await postgresReachable())
    measurements.push(...(await databaseRows('postgres', postgresTestDatabase(POSTGRES_URL))));
  else
    process.stdout.write(
      `reflect bench: PostgreSQL not reachable at ${describeUrl(POSTGRES_URL)}; SQLite only\n`,
    );
  return measurements;
}

const perSession = (value: number, sessions: number) => Number((value / Math.max(sessions, 1)).toFixed(2));

/** The table's rows of one database. */
function rows(database: string, samples: Map<ScenarioKey, Sample[]>): ReflectMeasurement[] {
  const of = (key: ScenarioKey) => samples.get(key) ?? [];
  const medianOf = (key: ScenarioKey, pick: (sample: Sample) => number) => median(of(key).map(pick));
  const slowest = (key: ScenarioKey) => Math.max(...of(key).map((s) => s.msPerSession));
  /** The figures a scenario's row adds, medians over rounds. */
  const figures = (key: ScenarioKey) => {
    const sessions = medianOf(key, (s) => s.sessions);
    return {
      sessions,
      totalMs: ms(medianOf(key, (s) => s.totalMs)),
      llmCallsPerSession: perSession(
        medianOf(key, (s) => s.llmCalls),
        sessions,
      ),
      inputTokensPerSession: Math.round(medianOf(key, (s) => s.inputTokens) / Math.max(sessions, 1)),
      outputTokensPerSession: Math.round(medianOf(key, (s) => s.outputTokens) / Math.max(sessions, 1)),
      chargedPerSession: perSession(
        medianOf(key, (s) => s.charged),
        sessions,
      ),
      inputCharsPerSession: Math.round(medianOf(key, (s) => s.inputChars) / Math.max(sessions, 1)),
      outputCharsPerSession: Math.round(medianOf(key, (s) => s.outputChars) / Math.max(sessions, 1)),
      calls: medianOf(key, (s) => s.llmCalls),
      facets: medianOf(key, (s) => s.facets),
      learnings: medianOf(key, (s) => s.learnings),
      skills: medianOf(key, (s) => s.skills),
    };
  };
  const row = (key: ScenarioKey, scenario: string): ReflectMeasurement[] => {
    if (of(key).length === 0) return [];
    const f = figures(key);
    return [
      {
        scenario: `${database} · ${scenario}`,
        concurrency: 1,
        rps: Math.round(
          1000 /
            Math.max(
              medianOf(key, (s) => s.msPerSession),
              0.001,
            ),
        ),
        p50Ms: ms(medianOf(key, (s) => s.msPerSession)),
        p99Ms: ms(slowest(key)),
        serverCpuUsPerRequest: Math.round(medianOf(key, (s) => s.cpuUsPerSession)),
        llmCallsPerSession: f.llmCallsPerSession,
        inputTokensPerSession: f.inputTokensPerSession,
        outputTokensPerSession: f.outputTokensPerSession,
        chargedPerSession: f.chargedPerSession,
        ...(f.inputCharsPerSession > 0
          ? { inputCharsPerSession: f.inputCharsPerSession, outputCharsPerSession: f.outputCharsPerSession }
          : {}),
        runs: of(key),
      },
    ];
  };
  /** `key`'s samples less `floor`'s, round by round, per session. */
  const added = (key: ScenarioKey, floor: ScenarioKey, scenario: string): ReflectMeasurement[] => {
    const pipeline = of(key);
    const floors = of(floor);
    if (pipeline.length === 0 || floors.length !== pipeline.length) return [];
    const paired = (pick: (sample: Sample) => number) => pairedMedian(pipeline, floors, pick);
    return [
      {
        scenario: `${database} · ${scenario}`,
        concurrency: 1,
        rps: 0,
        p50Ms: ms(paired((s) => s.msPerSession)),
        p99Ms: ms(Math.max(...pipeline.map((s, i) => s.msPerSession - (floors[i] as Sample).msPerSession))),
        serverCpuUsPerRequest: Math.round(paired((s) => s.cpuUsPerSession)),
      },
    ];
  };
  const described = (key: ScenarioKey) => {
    const f = figures(key);
    const usd = (f.chargedPerSession / USD).toFixed(6);
    return `${f.totalMs} ms in all; a session: ${f.llmCallsPerSession} LLM calls (${f.sessions} extraction + ${f.calls - f.sessions} synthesis), ${f.inputTokensPerSession} input + ${f.outputTokensPerSession} output tokens, ${f.chargedPerSession} base units charged (${usd} USD); produced: facets ${f.facets}, learnings ${f.learnings} (new or merged), skills ${f.skills}`;
  };
  const run = figures('run');
  const fresh = figures('run-new');
  const idle = figures('idle');
  return [
    ...row(
      'read',
      `floor: the ${run.sessions} sessions read as the pipeline reads them (the chat store's pending sessions, their messages unsealed, transcript lines), no model call`,
    ),
    ...row(
      'calls',
      `floor: the same reads and the pipeline's ${run.calls} model calls straight to the provider (no hold, charge or memory write)`,
    ),
    ...row(
      'run',
      `pipeline: trigger → run ended, ${run.sessions} stored sessions (BYOK, charged on the ledger); ${described('run')}`,
    ),
    ...added('run', 'read', 'added by the pipeline a session (run − read floor, paired)'),
    ...added(
      'run',
      'calls',
      'the rest of the pipeline a session (run − reads-and-calls floor, paired: holds and charges on the ledger, facets and watermarks, learnings, the run record)',
    ),
    ...row('read-new', `incremental floor: the ${fresh.sessions} new sessions read, no model call`),
    ...row(
      'calls-new',
      `incremental floor: those reads and the ${fresh.calls} model calls straight to the provider`,
    ),
    ...row(
      'run-new',
      `incremental: a second run after ${fresh.sessions} new sessions (only those read: the watermarks); ${described('run-new')}`,
    ),
    ...added('run-new', 'read-new', 'added by the incremental run a new session (run − read floor, paired)'),
    ...(of('idle').length === 0
      ? []
      : [
          {
            scenario: `${database} · nothing new: a third run, no session changed (p50 column: the run's whole time); ${idle.calls} LLM calls, ${idle.chargedPerSession} charged`,
            concurrency: 1,
            rps: 0,
            p50Ms: ms(medianOf('idle', (s) => s.totalMs)),
            p99Ms: ms(Math.max(...of('idle').map((s) => s.totalMs))),
            serverCpuUsPerRequest: Math.round(medianOf('idle', (s) => s.cpuUsPerSession)),
            runs: of('idle'),
          },
        ]),
  ];
}
