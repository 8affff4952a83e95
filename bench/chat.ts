/**
 * `chat`: what the runtime adds to a chat turn, against a direct SDK call to the same model server.
 *
 * One process holds everything: the runtime (Sigil's test Stack: a real kernel on SQLite, the
 * runtime and gateway apps on ephemeral ports, logging quiet) with `provider-local`, whose stand-in
 * is the model server of both paths. A wallet signs in, has 1000 USD on its ledger, stores and
 * unlocks its BYOK key, and owns an agent on `sigil-echo`.
 *
 * - direct: the `openai` SDK (one client, `baseURL` the stand-in's `/v1`) streams
 *   `chat.completions.create({ stream: true })`; time to first token is the first chunk with content.
 * - runtime: `POST /agents/:id/sessions/:sid/messages` over HTTP (fetch, keep-alive), the answer an SSE
 *   stream; time to first token is the first `text-delta` event, total time the end of the stream
 *   (after `cost` and `done`, i.e. with the ledger charge). Each turn gets a fresh session without
 *   tool servers (opened and closed outside the timing), so every turn sends the same prompt.
 *
 * - runtime with one gateway tool: a session with the probe MCP server enabled (the gateway of the same
 *   Stack installs it from a local verdaccio into the linux-namespaces sandbox), each message asking
 *   the stand-in to `use tool probe__echo`: the model's tool call, the gateway's tools/call, the
 *   model's answer. The session is kept across its messages, as a user's chat is; the rows count the
 *   requests the gateway's port served a message (issue 30, target 3: at most one round trip beyond
 *   the tools/call itself) on the session's first message and on the later ones, and time the turn.
 *
 * BENCH_CPU_PROFILE=<dir> writes a V8 CPU profile of each measured run (bench/proc.ts `profiled`).
 *
 * BENCH_RUNS runs (3), each BENCH_CHAT_TURNS measured turns (200) after BENCH_CHAT_WARMUP (30), one in
 * flight; the runs alternate direct, runtime, direct, …; rows are medians over runs and the added rows
 * the median of paired differences (targets, issue 30: added time-to-first-token p50 ≤ 2 ms, runtime CPU
 * ≤ 3 ms a turn). "server CPU" is this process's CPU per turn: client, stand-in and (on the runtime
 * rows) the runtime with the session opened and closed around each turn. The runtime's own CPU per
 * turn subtracts, run by run, a loop of those sessions opened and closed alone and the direct call
 * (the stand-in and the model client, which the runtime's turn has too); what stays beside the
 * runtime is the difference between the two clients (fetch reading SSE, the openai SDK).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import OpenAI from 'openai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { LocalProvider } from '../providers/local/index.ts';
import { PROVIDER_VAULT_MESSAGE } from '../services/runtime/vault/index.ts';
import { setOnChain } from '../test/services/runtime/ledger/support.ts';
import { Stack } from '../test/services/runtime/support.ts';
import { TEST_DATABASES } from '../test/support/kernel.ts';
import { startVerdaccio } from '../test/support/verdaccio.ts';
import { probePackage, probeWorkDir } from './probe-gateway.ts';
import { profiled } from './proc.ts';
import { log, median, ms } from './stats.ts';

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const TURNS = Number(process.env.BENCH_CHAT_TURNS ?? 200);
const WARMUP = Number(process.env.BENCH_CHAT_WARMUP ?? 30);
const TARGET_ADDED_TTFT_P50_MS = 2;
const TARGET_RUNTIME_CPU_US = 3000;
/** Gateway requests a kept session's message may make beyond the tools/call it asks for. */
const TARGET_EXTRA_ROUND_TRIPS = 1;
/** Later messages of each tool session: under a session's 100 (runtime.chat.maxMessagesPerSession). */
const TOOL_TURNS = Number(process.env.BENCH_CHAT_TOOL_TURNS ?? 50);
const TOOL_PROMPT = 'use tool probe__echo with {"message":"bench"}';
const MODEL = 'sigil-echo';
const PROMPT = 'the quick brown fox jumps over the lazy dog and runs far away into the green hills';

export interface ChatMeasurement {
  scenario: string;
  concurrency: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerRequest: number;
  target?: string;
  met?: boolean;
  turnsPerRun?: number;
  warmupTurns?: number;
  runs?: Run[];
}

interface Run {
  rps: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  totalP50Ms: number;
  totalP99Ms: number;
  cpuUsPerTurn: number;
  hostLoad: number;
}

interface Turn {
  ttftMs: number;
  totalMs: number;
}

const percentile = (values: readonly number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
};

async function measureRun(name: string, turn: () => Promise<Turn>): Promise<Run> {
  for (let i = 0; i < WARMUP; i++) await turn();
  const turns: Turn[] = [];
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  await profiled(name, async () => {
    for (let i = 0; i < TURNS; i++) turns.push(await turn());
  });
  const elapsed = performance.now() - started;
  const cpu = process.cpuUsage(cpuBefore);
  const ttft = turns.map((t) => t.ttftMs);
  const total = turns.map((t) => t.totalMs);
  return {
    rps: Math.round((TURNS / elapsed) * 1000),
    ttftP50Ms: ms(percentile(ttft, 50)),
    ttftP99Ms: ms(percentile(ttft, 99)),
    totalP50Ms: ms(percentile(total, 50)),
    totalP99Ms: ms(percentile(total, 99)),
    cpuUsPerTurn: Math.round((cpu.user + cpu.system) / TURNS),
    hostLoad: Number((loadavg()[0] ?? 0).toFixed(2)),
  };
}

export async function chatSuite(): Promise<ChatMeasurement[]> {
  const dir = mkdtempSync(join(tmpdir(), 'sigil-bench-chat-'));
  const database = TEST_DATABASES[0];
  if (!database) throw new Error('no test database');
  const registry = await startVerdaccio({ packages: [{ dir: probePackage }] });
  const gatewayWork = probeWorkDir('sigil-bench-chat-');
  const stack = await Stack.start({
    database,
    config: {
      vault: { persistenceDir: dir },
      gateway: { includeDefaultCatalog: false, warmupAtStart: false, catalogFile: gatewayWork.catalogFile },
      // BENCH_CHAT_CONTEXT_CACHE_SECONDS=0: self-improvement's settings and memory read for each turn (as before the cache).
      ...(process.env.BENCH_CHAT_CONTEXT_CACHE_SECONDS === undefined
        ? {}
        : {
            runtime: {
              selfImprovement: { contextCacheSeconds: Number(process.env.BENCH_CHAT_CONTEXT_CACHE_SECONDS) },
            },
          }),
      plugins: [
        { resolve: 'tee-none', enabled: true, options: {} },
        {
          resolve: 'registry-npm',
          enabled: true,
          options: { registry: registry.url, cacheDir: join(gatewayWork.dir, 'packages') },
        },
        {
          resolve: 'sandbox-linux-namespaces',
          enabled: true,
          options: { stateDir: join(gatewayWork.dir, 'sandboxes') },
        },
        { resolve: 'provider-local', enabled: true, options: {} },
      ],
    },
  });
  try {
    const standIn = (stack.kernel.plugins.all('llm-provider')[0] as LocalProvider).standIn;
    if (!standIn) throw new Error('the provider-local stand-in is not running');
    const apiKey = 'sk-bench-own-key';

    // The runtime's wallet: signed in, funded on its ledger, its key stored and unlocked, an agent.
    const wallet = privateKeyToAccount(generatePrivateKey());
    const jwt = await stack.signIn(wallet);
    await setOnChain(stack.runtime.ledger.ledger, wallet.address, 1_000_000_000n);
    const base = stack.url('runtime');
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${base}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${jwt}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
      return (text === '' ? {} : JSON.parse(text)) as Record<string, unknown>;
    };
    const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
    await call('PUT', '/wallet/provider-vault/keys/PROVIDER_API_KEY', { apiKey, signature });
    await call('POST', '/wallet/provider-vault/unlock', { signature });
    const agentId = (await call('POST', '/agents', { name: 'bench', model: MODEL })).id as string;

    const openSession = async (servers: string[] = []) =>
      (await call('POST', `/agents/${agentId}/sessions`, servers.length > 0 ? { servers } : {})).id as string;
    const closeSession = (session: string) => call('DELETE', `/agents/${agentId}/sessions/${session}`);
    // The runtime rows' CPU includes opening and closing each turn's session: measured alone, subtracted.
    const sessionOnlyTurn = async (): Promise<Turn> => {
      await closeSession(await openSession());
      return { ttftMs: 0, totalMs: 0 };
    };
    /** One message of `session`, its answer read to the end of the stream (its done event saying `expect`). */
    const message = async (session: string, content: string, expect: string): Promise<Turn> => {
      const started = performance.now();
      const res = await fetch(`${base}/agents/${agentId}/sessions/${session}/messages`, {
        method: 'POST',
        headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
        body: JSON.stringify({ content }),
      });
      if (res.status !== 200) throw new Error(`chat: ${res.status} ${await res.text()}`);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let seen = '';
      let ttft: number | undefined;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        seen += decoder.decode(value, { stream: true });
        if (ttft === undefined && seen.includes('event: text-delta')) ttft = performance.now() - started;
      }
      const total = performance.now() - started;
      if (!seen.includes('event: done') || seen.includes('event: error') || !seen.includes(expect))
        throw new Error(`chat: the stream did not end with done, saying ${expect}: ${seen.slice(-400)}`);
      return { ttftMs: ttft ?? total, totalMs: total };
    };
    const runtimeTurn = async (): Promise<Turn> => {
      const session = await openSession();
      const turn = await message(session, PROMPT, '"toolCalls":0');
      await closeSession(session);
      return turn;
    };

    const client = new OpenAI({ apiKey, baseURL: `${standIn.url}/v1`, maxRetries: 0 });
    const directTurn = async (): Promise<Turn> => {
      const started = performance.now();
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: PROMPT }],
        max_tokens: 4096,
        stream: true,
        stream_options: { include_usage: true },
      });
      let ttft: number | undefined;
      let text = '';
      for await (const chunk of stream) {
        const delta = chunk.choices[0]?.delta?.content;
        if (delta) {
          if (ttft === undefined) ttft = performance.now() - started;
          text += delta;
        }
      }
      const total = performance.now() - started;
      if (text !== PROMPT) throw new Error(`direct: unexpected answer ${JSON.stringify(text)}`);
      return { ttftMs: ttft ?? total, totalMs: total };
    };

    const runs = { direct: [] as Run[], runtime: [] as Run[], sessionOnly: [] as Run[] };
    for (let i = 0; i < RUNS; i++) {
      runs.direct.push(await measureRun(`chat-direct-${i}`, directTurn));
      runs.runtime.push(await measureRun(`chat-runtime-${i}`, runtimeTurn));
      runs.sessionOnly.push(await measureRun(`chat-session-only-${i}`, sessionOnlyTurn));
    }
    const tools = await toolTurns(stack, {
      open: () => openSession(['probe']),
      close: closeSession,
      message: (session) => message(session, TOOL_PROMPT, '"toolCalls":1'),
    });
    const perRun = { turnsPerRun: TURNS, warmupTurns: WARMUP };
    const row = (
      scenario: string,
      list: Run[],
      p50: (r: Run) => number,
      p99: (r: Run) => number,
    ): ChatMeasurement => ({
      scenario,
      concurrency: 1,
      rps: Math.round(median(list.map((r) => r.rps))),
      p50Ms: ms(median(list.map(p50))),
      p99Ms: ms(median(list.map(p99))),
      serverCpuUsPerRequest: Math.round(median(list.map((r) => r.cpuUsPerTurn))),
      ...perRun,
      runs: list,
    });
    const added = (pick: (r: Run) => number) =>
      median(runs.runtime.map((r, i) => pick(r) - pick(runs.direct[i] as Run)));
    const addedTtft = added((r) => r.ttftP50Ms);
    /** Per run: the runtime turn's CPU less its session's opening and closing and less the direct call's. */
    const runtimeOwnCpu = runs.runtime.map(
      (r, i) =>
        r.cpuUsPerTurn - (runs.sessionOnly[i] as Run).cpuUsPerTurn - (runs.direct[i] as Run).cpuUsPerTurn,
    );
    const ownCpu = Math.round(median(runtimeOwnCpu));
    const results: ChatMeasurement[] = [
      row(
        `direct: openai SDK streaming ${MODEL} from the provider-local stand-in, time to first token`,
        runs.direct,
        (r) => r.ttftP50Ms,
        (r) => r.ttftP99Ms,
      ),
      row(
        'direct: the same call, total time',
        runs.direct,
        (r) => r.totalP50Ms,
        (r) => r.totalP99Ms,
      ),
      row(
        'runtime: one chat turn over SSE (BYOK key unlocked, no tool servers), time to first token',
        runs.runtime,
        (r) => r.ttftP50Ms,
        (r) => r.ttftP99Ms,
      ),
      row(
        'runtime: the same turn, total time (to the end of the stream: cost, charge, done)',
        runs.runtime,
        (r) => r.totalP50Ms,
        (r) => r.totalP99Ms,
      ),
      {
        scenario: `added by the runtime to time to first token (runtime − direct, median of paired runs); target p50 ≤ ${TARGET_ADDED_TTFT_P50_MS} ms: ${addedTtft <= TARGET_ADDED_TTFT_P50_MS ? 'met' : 'not met'}`,
        concurrency: 1,
        rps: 0,
        p50Ms: ms(addedTtft),
        p99Ms: ms(added((r) => r.ttftP99Ms)),
        serverCpuUsPerRequest: Math.round(added((r) => r.cpuUsPerTurn)),
        target: `added TTFT p50 ≤ ${TARGET_ADDED_TTFT_P50_MS} ms`,
        met: addedTtft <= TARGET_ADDED_TTFT_P50_MS,
      },
      {
        scenario: `runtime CPU per turn (runtime turn − session open and close alone − direct call, median of paired runs; per run: ${runtimeOwnCpu.map((us) => `${us} µs`).join(', ')}); target ≤ ${TARGET_RUNTIME_CPU_US} µs: ${ownCpu <= TARGET_RUNTIME_CPU_US ? 'met' : 'not met'}`,
        concurrency: 1,
        rps: 0,
        p50Ms: 0,
        p99Ms: 0,
        serverCpuUsPerRequest: ownCpu,
        target: `runtime CPU ≤ ${TARGET_RUNTIME_CPU_US} µs per turn`,
        met: ownCpu <= TARGET_RUNTIME_CPU_US,
      },
      {
        scenario: 'added by the runtime to total time (runtime − direct, median of paired runs)',
        concurrency: 1,
        rps: 0,
        p50Ms: ms(added((r) => r.totalP50Ms)),
        p99Ms: ms(added((r) => r.totalP99Ms)),
        serverCpuUsPerRequest: Math.round(added((r) => r.cpuUsPerTurn)),
      },
      ...tools.rows(median(runs.runtime.map((r) => r.totalP50Ms))),
    ];
    for (const result of results) log(result);
    return results;
  } finally {
    await stack.close();
    await registry.stop();
    rmSync(dir, { recursive: true, force: true });
    rmSync(gatewayWork.dir, { recursive: true, force: true });
  }
}

/**
 * The tool rows: after a warm-up session, RUNS sessions with the probe enabled, each of one first
 * message (the MCP client connects, enables the server and lists its tools) and TOOL_TURNS later ones
 * (its kept client); the gateway requests of each message counted on the gateway's port.
 */
async function toolTurns(
  stack: Stack,
  session: {
    open(): Promise<string>;
    close(session: string): Promise<unknown>;
    message(session: string): Promise<Turn>;
  },
) {
  const served = () => stack.gatewayRequests().length;
  const firstRequests: number[] = [];
  const laterRequests: number[] = [];
  const later: Turn[] = [];
  const first: Turn[] = [];
  // Outside the counts: the probe's install and its sandboxed process's start, the code's first runs.
  const warm = await session.open();
  for (let i = 0; i < WARMUP; i++) await session.message(warm);
  await session.close(warm);
  for (let run = 0; run < RUNS; run++) {
    const id = await session.open();
    let before = served();
    first.push(await session.message(id));
    firstRequests.push(served() - before);
    before = served();
    for (let i = 0; i < TOOL_TURNS; i++) later.push(await session.message(id));
    laterRequests.push((served() - before) / TOOL_TURNS);
    await session.close(id);
  }
  const extra = Math.max(...laterRequests) - 1;
  const total = later.map((t) => t.totalMs);
  return {
    /** `noToolTotalP50Ms`: the runtime's turn without tools, total time (this run's row). */
    rows: (noToolTotalP50Ms: number): ChatMeasurement[] => [
      {
        scenario: `runtime with one gateway tool: a kept session's message (model tool call, gateway tools/call of probe__echo in the sandbox, model answer), total time; gateway requests a message: ${laterRequests.join(', ')} (per session); target ≤ ${TARGET_EXTRA_ROUND_TRIPS} beyond the tools/call: ${extra <= TARGET_EXTRA_ROUND_TRIPS ? 'met' : 'not met'}`,
        concurrency: 1,
        rps: 0,
        p50Ms: ms(percentile(total, 50)),
        p99Ms: ms(percentile(total, 99)),
        serverCpuUsPerRequest: 0,
        target: `≤ ${TARGET_EXTRA_ROUND_TRIPS} gateway round trip beyond the tools/call`,
        met: extra <= TARGET_EXTRA_ROUND_TRIPS,
        turnsPerRun: TOOL_TURNS,
      },
      {
        scenario: `runtime with one gateway tool: − the turn without tools (total p50: the tool call, the model's second turn and their bookkeeping)`,
        concurrency: 1,
        rps: 0,
        p50Ms: ms(percentile(total, 50) - noToolTotalP50Ms),
        p99Ms: 0,
        serverCpuUsPerRequest: 0,
      },
      {
        scenario: `runtime with one gateway tool: a session's first message (connect, enable, list, call), total time; gateway requests: ${firstRequests.join(', ')} (per session)`,
        concurrency: 1,
        rps: 0,
        p50Ms: ms(median(first.map((t) => t.totalMs))),
        p99Ms: ms(Math.max(...first.map((t) => t.totalMs))),
        serverCpuUsPerRequest: 0,
      },
    ],
  };
}
