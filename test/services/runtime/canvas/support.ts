import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import type { PluginEntry } from '../../../../core/config/schema.ts';
import type { LocalProvider } from '../../../../providers/local/index.ts';
import { openTestKernel, type ConfigOverrides, type TestDatabase } from '../../../support/kernel.ts';
import { fixturePath } from '../../../support/paths.ts';
import type { ProbeWorld } from '../../gateway/support.ts';
import { readSse, runtimeClient, storeAndUnlock, type SseEvent } from '../chat-support.ts';
import { setOnChain } from '../ledger/support.ts';
import { pluginsWithLocalProvider, Stack } from '../support.ts';

/**
 * The canvas test node kinds (test/fixtures/canvas): emit, join, flaky, hang, observe (the test's
 * hook), gate (approval), record and witness (writes, the latter the test's hook), leak (a careless
 * reader of secrets).
 */
export const FIXTURE_NODES = [
  'emit',
  'join',
  'flaky',
  'hang',
  'observe',
  'gate',
  'record',
  'witness',
  'leak',
];

const fixtureEntries = (): PluginEntry[] =>
  FIXTURE_NODES.map((name) => ({ resolve: `./${name}.ts`, enabled: true, options: {} }) as PluginEntry);

/**
 * A kernel for `serve(kernel, ['runtime'])` with the canvas fixture nodes and provider-local, its runs'
 * workspaces in `dataDir`: for tests of the served runtime itself (its streams, its shutdown).
 */
export const openCanvasKernel = (database: TestDatabase, dataDir: string) =>
  openTestKernel({
    database,
    configDir: fixturePath('canvas'),
    config: {
      runtime: { port: 0, canvas: { dataDir, retryBackoffMs: 0 } as never },
      plugins: [...pluginsWithLocalProvider(), ...fixtureEntries()],
    },
  });

export interface CanvasWorldOptions {
  database: TestDatabase;
  /** Where runs' workspaces live; a fresh directory by default (the same one again to restart). */
  dataDir?: string;
  canvas?: Record<string, unknown>;
  plugins?: PluginEntry[];
  /** Gateway servers: the probe world's catalog, installed from its registry into real sandboxes. */
  probe?: ProbeWorld;
  /** Where the kernel's log lines go (none by default). */
  logs?: Writable;
  /** Replicas' settings (database.shared, leaseSeconds, …). */
  replicas?: ConfigOverrides['database'];
}

/** A runtime (and gateway) on a real kernel with the canvas fixture nodes and provider-local loaded. */
export async function startCanvasWorld(options: CanvasWorldOptions) {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'sigil-canvas-data-'));
  const { probe } = options;
  const stack = await Stack.start({
    database: options.database,
    configDir: fixturePath('canvas'),
    ...(options.logs ? { logs: options.logs } : {}),
    config: {
      ...(options.replicas ? { database: options.replicas } : {}),
      plugins: [
        ...(probe
          ? [...probe.plugins(), { resolve: 'provider-local', enabled: true, options: {} } as PluginEntry]
          : pluginsWithLocalProvider()),
        ...fixtureEntries(),
        ...(options.plugins ?? []),
      ],
      runtime: { canvas: { dataDir, retryBackoffMs: 0, ...options.canvas } as never },
      ...(probe ? { gateway: { includeDefaultCatalog: false, catalogFile: probe.catalogFile } } : {}),
    },
  });
  await stack.runtime.canvas.start();
  return {
    stack,
    dataDir,
    close: async () => {
      await stack.runtime.canvas.close();
      await stack.close();
    },
    removeData: () => rmSync(dataDir, { recursive: true, force: true }),
  };
}

export type CanvasWorld = Awaited<ReturnType<typeof startCanvasWorld>>;

/** A new wallet signed in to the world's runtime, with an agent (on the stand-in's `sigil-echo`). */
export async function canvasUser(
  stack: Stack,
  wallet: PrivateKeyAccount = privateKeyToAccount(generatePrivateKey()),
) {
  const jwt = await stack.signIn(wallet);
  const client = runtimeClient(stack.url('runtime'), jwt);
  const agent = await client.json('POST', '/agents', { name: 'canvas', model: 'sigil-echo' });
  if (agent.status !== 201) throw new Error(`agent: ${agent.status} ${JSON.stringify(agent.body)}`);
  return { wallet, jwt, client, agentId: agent.body.id as string };
}

export type CanvasUser = Awaited<ReturnType<typeof canvasUser>>;

/** A canvas user whose ledger holds `funds`, its own provider key stored and unlocked (model turns). */
export async function fundedCanvasUser(
  stack: Stack,
  funds: bigint,
  wallet?: PrivateKeyAccount,
): Promise<CanvasUser> {
  const user = await canvasUser(stack, wallet);
  await setOnChain(stack.runtime.ledger.ledger, user.wallet.address, funds);
  await storeAndUnlock(user.client, user.wallet, 'PROVIDER_API_KEY', 'sk-canvas-own-key-0123456789');
  return user;
}

/** The wallet's ledger charges for one node of a run (the keys of its holds name the run and the node). */
export async function nodeCharges(user: CanvasUser, runId: string, nodeId: string): Promise<bigint[]> {
  const history = await user.client.json('GET', '/wallet/transactions?kind=charge&limit=200');
  return (history.body.transactions as { amount: string; idempotencyKey: string }[])
    .filter((entry) => entry.idempotencyKey.startsWith(`canvas:${runId}:${nodeId}:`))
    .map((entry) => BigInt(entry.amount));
}

/** The model turns the world's local stand-in LLM answered. */
export const modelTurnsServed = (stack: Stack): number =>
  (stack.kernel.plugins.all('llm-provider')[0] as LocalProvider).standIn?.stats().served ?? 0;

/** A workflow document of the given nodes and edges (`a.value -> b.after`). */
export const workflow = (
  nodes: {
    id: string;
    kind: string;
    params?: Record<string, unknown>;
    retries?: number;
    timeoutSeconds?: number;
  }[],
  edges: string[] = [],
  extra: Record<string, unknown> = {},
) => ({
  format: 'sigil.canvas.workflow/v1',
  name: 'test',
  nodes,
  edges: edges.map((edge) => {
    const [from, to] = edge.split(' -> ');
    return { from, to };
  }),
  ...extra,
});

/** Runs a document over SSE; resolves with the response once its headers came (or the refusal). */
export const execute = (user: CanvasUser, body: Record<string, unknown>, signal?: AbortSignal) =>
  user.client.send('POST', '/canvas/workflows/execute/stream', { agentId: user.agentId, ...body }, signal);

/** Reads a run's stream until `until` (by default its end). */
export const eventsUntil = (
  res: Response,
  until: (event: SseEvent) => boolean = (e) => e.event === 'run.ended',
) => readSse(res, until);

/** The run id of a stream's first event. */
export const runIdOf = (events: SseEvent[]): string => events[0]?.data.runId as string;

/** The model node kind's plugin (`llm`), to load beside the fixtures. */
export const LLM_NODE: PluginEntry[] = [{ resolve: 'canvas-llm', enabled: true, options: {} } as PluginEntry];

/** A page drafted, approved (node `approve`, the test's `gate`), then written (`record`). */
export const approvalFlow = workflow(
  [
    { id: 'draft', kind: 'emit', params: { value: '<h1>Hello</h1>' } },
    { id: 'approve', kind: 'gate' },
    { id: 'write', kind: 'record' },
  ],
  ['draft.value -> approve.value', 'approve.value -> write.value'],
);

/** The event a run's stream sends once the run waits for an approval. */
export const waitingForApproval = (e: SseEvent) =>
  e.event === 'run.status' && e.data.status === 'waiting_approval';
