/**
 * What the `canvas` suite measures against: a runtime served the way `sigil up` serves it (a real
 * kernel on a fresh SQLite file, `serve(kernel, ['runtime'])` on an ephemeral port, quiet logs) with
 * the bench node kinds of bench/fixtures/canvas, and one wallet signed in (SIWE) with an agent.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import knex from 'knex';
import { pino } from 'pino';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import type { CanvasSettings } from '../services/runtime/canvas/config.ts';
import { configSchema } from '../services/config.ts';
import { openKernel, type Kernel } from '../services/kernel.ts';
import { serve } from '../services/serve.ts';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'canvas');

export interface CanvasWorld {
  kernel: Kernel;
  /** The runtime's base URL. */
  url: string;
  /** The signed-in wallet's address and its agent. */
  wallet: string;
  agentId: string;
  /** A request to the runtime as the signed-in wallet. */
  send(method: string, path: string, body?: unknown): Promise<Response>;
  close(): Promise<void>;
}

/** Where a world's runtime keeps its data: a fresh SQLite file, or a fresh schema in a PostgreSQL database. */
export type WorldDatabase = { name: 'sqlite' } | { name: 'postgres'; url: string };

export async function openCanvasWorld(
  canvas: Partial<CanvasSettings>,
  database: WorldDatabase = { name: 'sqlite' },
): Promise<CanvasWorld> {
  const dir = mkdtempSync(join(tmpdir(), 'sigil-bench-canvas-'));
  const schema = `bench_canvas_${process.pid}_${randomBytes(4).toString('hex')}`;
  const dropSchema = async () => {
    if (database.name !== 'postgres') return;
    const admin = knex({ client: 'pg', connection: database.url, pool: { min: 0, max: 1 } });
    await admin.raw(`drop schema if exists "${schema}" cascade`).finally(() => admin.destroy());
  };
  const config = configSchema.parse({
    database: { url: database.name === 'postgres' ? database.url : join(dir, 'sigil.db') },
    log: { level: 'silent' },
    gateway: { warmupAtStart: false },
    vault: { persistenceDir: join(dir, 'vault') },
    runtime: {
      host: '127.0.0.1',
      port: 0,
      canvas: { dataDir: join(dir, 'canvas'), ...canvas },
    },
    plugins: [
      { resolve: 'tee-none' },
      // An agent names a model a provider offers: the local stand-in's (no node here calls it).
      { resolve: 'provider-local' },
      { resolve: './noop.ts' },
      { resolve: './approval.ts' },
    ],
  });
  const kernel = await openKernel({
    // Plugin paths resolve from the config file's folder: the bench node kinds'.
    loaded: { config, file: join(FIXTURES, 'sigil.config.json'), envOverrides: [] },
    logger: pino({ level: 'silent' }),
    ...(database.name === 'postgres' ? { dbSchema: schema } : {}),
  }).catch(async (err: unknown) => {
    await dropSchema();
    throw err;
  });
  const serving = await serve(kernel, ['runtime']).catch(async (err: unknown) => {
    await kernel.close();
    await dropSchema();
    throw err;
  });
  const url = serving.urls.runtime as string;
  const close = async () => {
    await serving.stop();
    await dropSchema();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const wallet = privateKeyToAccount(generatePrivateKey());
    const jwt = await signIn(url, wallet);
    const send = (method: string, path: string, body?: unknown) =>
      fetch(`${url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${jwt}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const agent = await send('POST', '/agents', { name: 'bench', model: 'sigil-echo' });
    if (agent.status !== 201) throw new Error(`POST /agents: ${agent.status} ${await agent.text()}`);
    const { id: agentId } = (await agent.json()) as { id: string };
    return { kernel, url, wallet: wallet.address, agentId, send, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Signs `wallet` in to the runtime at `url` with SIWE: its session JWT. */
async function signIn(url: string, wallet: PrivateKeyAccount): Promise<string> {
  const challenge = await fetch(`${url}/auth/challenge?address=${wallet.address}`);
  const { message } = (await challenge.json()) as { message: string };
  const verified = await fetch(`${url}/auth/verify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message, signature: await wallet.signMessage({ message }) }),
  });
  if (verified.status !== 200) throw new Error(`sign-in: ${verified.status} ${await verified.text()}`);
  return ((await verified.json()) as { token: string }).token;
}

export interface StreamedEvent {
  event: string;
  data: Record<string, unknown>;
  /** performance.now() when its bytes were read. */
  at: number;
}

/** A text/event-stream response's events as they arrive (comments skipped), each with its arrival time. */
export async function* sseEvents(res: Response): AsyncGenerator<StreamedEvent> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const at = performance.now();
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = 'message';
        let data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) event = line.slice(7);
          else if (line.startsWith('data: ')) data += line.slice(6);
        }
        if (data !== '') yield { event, data: JSON.parse(data) as Record<string, unknown>, at };
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
