import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { Redactor } from '@sigil/plugin-api';
import { ServerPool, type RunningServer, type ServerKey } from '../../../services/gateway/server-pool.ts';
import { RetryLater } from '../../../services/gateway/retry-later.ts';
import { quietLogger } from '../../support/kernel.ts';
import { fixturePath } from '../../support/paths.ts';

const probe = fixturePath('mcp', 'probe-package', 'server.mjs');

/** Starts the probe server as a plain child process (the sandbox is tested on its own). */
async function launchProbe(): Promise<RunningServer> {
  const transport = new StdioClientTransport({ command: process.execPath, args: [probe], stderr: 'ignore' });
  const client = new Client({ name: 'pool-test', version: '1.0.0' });
  // Set before connect: the client chains its own close handling onto it.
  const exited = new Promise<void>((resolve) => (transport.onclose = resolve));
  await client.connect(transport);
  return {
    protocol: { era: 'legacy', version: '2025-11-25' },
    // The SDK client's own call: the pool does not care how a tool is called.
    callTool: async (name, args, options) =>
      (await client.callTool({ name, arguments: args }, undefined, {
        timeout: options.timeoutMs,
      })) as CallToolResult,
    exited,
    kill: () => client.close(),
    injected: { names: [], redactor: Redactor.none },
  };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setImmediate(resolve));
}

const textOf = (result: unknown) =>
  ((result as { content: { text: string }[] }).content[0] as { text: string }).text;

describe('server pool', function () {
  this.timeout(30_000);
  let pool: ServerPool;
  let launches: ServerKey[];
  const key = (serverId: string, wallet = 'anonymous'): ServerKey => ({ serverId, wallet });
  const instanceOf = (k: ServerKey) =>
    pool.use(k, async (s) => textOf(await s.callTool('instance', {}, { timeoutMs: 10_000 })));

  const newPool = (
    options: {
      idleMs?: number;
      maxRunning?: number;
      queueLength?: number;
      queueWaitMs?: number;
      launch?: () => Promise<RunningServer>;
      outdated?: (key: ServerKey, server: RunningServer) => Promise<boolean>;
    } = {},
  ) =>
    new ServerPool({
      launch: (k) => {
        launches.push(k);
        return (options.launch ?? launchProbe)();
      },
      idleMs: options.idleMs ?? 60_000,
      maxRunning: options.maxRunning ?? 4,
      queueLength: options.queueLength ?? 0,
      queueWaitMs: options.queueWaitMs ?? 0,
      ...(options.outdated && { outdated: options.outdated }),
      logger: quietLogger(),
    });

  beforeEach(() => {
    launches = [];
  });
  afterEach(() => pool.stopAll());

  it('starts on first use and reuses the warm process', async () => {
    pool = newPool();
    const first = await instanceOf(key('probe'));
    const second = await instanceOf(key('probe'));
    expect(second).to.equal(first);
    expect(launches).to.have.length(1);
  });

  it('starts exactly one process for parallel first calls', async () => {
    pool = newPool();
    const instances = await Promise.all(Array.from({ length: 8 }, () => instanceOf(key('probe'))));
    expect(new Set(instances).size).to.equal(1);
    expect(launches).to.have.length(1);
  });

  it('keeps one process per wallet', async () => {
    pool = newPool();
    const [a, b] = await Promise.all([instanceOf(key('probe', '0xA')), instanceOf(key('probe', '0xB'))]);
    expect(a).not.to.equal(b);
    expect(pool.running()).to.have.length(2);
  });

  it('replaces a warm process that is outdated (its secrets changed) before its next call', async () => {
    let current = 1;
    pool = newPool({
      launch: async () => ({
        ...(await launchProbe()),
        injected: { names: [], redactor: Redactor.none, version: current },
      }),
      outdated: async (_key, server) => (server.injected.version ?? 0) < current,
    });
    const k = key('probe', '0x0000000000000000000000000000000000000001');
    const old = await pool.use(k, async (server) => server);
    const first = await instanceOf(k);
    expect(await instanceOf(k)).to.equal(first);
    current = 2;
    const second = await instanceOf(k);
    expect(second).to.not.equal(first);
    await old.exited; // the outdated process was stopped, not left running
    expect(launches).to.have.length(2);
    expect(pool.running()).to.have.length(1);
    expect(await instanceOf(k)).to.equal(second);
  });

  it('stops a process after the inactivity period', async () => {
    pool = newPool({ idleMs: 150 });
    await instanceOf(key('probe'));
    expect(pool.running()).to.have.length(1);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(pool.running()).to.have.length(0);
    await instanceOf(key('probe'));
    expect(launches).to.have.length(2);
  });

  it('restarts a crashed server on the next call', async () => {
    pool = newPool();
    const before = await instanceOf(key('probe'));
    await pool
      .use(key('probe'), (s) => s.callTool('crash', {}, { timeoutMs: 10_000 }))
      .catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const after = await instanceOf(key('probe'));
    expect(after).not.to.equal(before);
    expect(launches).to.have.length(2);
  });

  it('evicts the least recently used idle process at the cap', async () => {
    pool = newPool({ maxRunning: 2 });
    await instanceOf(key('one'));
    await instanceOf(key('two'));
    await instanceOf(key('one'));
    await instanceOf(key('three'));
    expect(pool.running().map((k) => k.serverId)).to.deep.equal(['one', 'three']);
  });

  it('refuses a new server when every slot is busy', async () => {
    pool = newPool({ maxRunning: 1 });
    const slow = pool.use(key('one'), (s) => s.callTool('sleep', { ms: 400 }, { timeoutMs: 10_000 }));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const err = await instanceOf(key('two')).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(RetryLater);
    expect(err).to.include({ code: 'unavailable', retryAfterSeconds: 1 });
    expect((err as RetryLater).headers).to.deep.equal({ 'Retry-After': '1' });
    expect(textOf(await slow)).to.equal('slept 400');
  });

  it('queues a call for a process until one is free, first come first served', async () => {
    pool = newPool({ maxRunning: 1, queueLength: 2, queueWaitMs: 20_000 });
    let finish!: () => void;
    const held = pool.use(key('one'), () => new Promise<void>((resolve) => (finish = resolve)));
    await until(() => finish !== undefined);
    const order: string[] = [];
    const second = instanceOf(key('two')).then(() => order.push('two'));
    const third = instanceOf(key('three')).then(() => order.push('three'));
    const refused = await instanceOf(key('four')).catch((e: unknown) => e);
    expect(refused, 'the queue is full').to.include({ code: 'unavailable' });
    expect(pool.running().map((k) => k.serverId)).to.deep.equal(['one']);
    finish();
    await Promise.all([held, second, third]);
    expect(order).to.deep.equal(['two', 'three']);
    expect(launches.map((k) => k.serverId)).to.deep.equal(['one', 'two', 'three']);
  });

  it('lets a queued call join the process another queued call of its key started', async () => {
    pool = newPool({ maxRunning: 1, queueLength: 4, queueWaitMs: 20_000 });
    let finish!: () => void;
    const held = pool.use(key('one'), () => new Promise<void>((resolve) => (finish = resolve)));
    await until(() => finish !== undefined);
    // The first call for 'two' holds its process until the second has been served on it.
    let serveSecond!: (served: Promise<string>) => void;
    const second = new Promise<string>((resolve) => (serveSecond = resolve));
    const first = pool.use(key('two'), () => second);
    serveSecond(instanceOf(key('two')));
    finish();
    await Promise.all([held, first, second]);
    expect(launches.map((k) => k.serverId)).to.deep.equal(['one', 'two']);
  });

  it('refuses a queued call when its wait runs out', async () => {
    pool = newPool({ maxRunning: 1, queueLength: 4, queueWaitMs: 300 });
    let finish!: () => void;
    const held = pool.use(key('one'), () => new Promise<void>((resolve) => (finish = resolve)));
    await until(() => finish !== undefined);
    const err = await instanceOf(key('two')).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(RetryLater);
    expect(err).to.include({ code: 'unavailable' });
    finish();
    await held;
    expect(launches).to.have.length(1);
  });

  it('frees the slot of a discarded process at once, before the process has ended', async () => {
    // A process that takes forever to die: the next call must not wait for it.
    let endless: RunningServer | undefined;
    let stopEndless: (() => Promise<void>) | undefined;
    pool = newPool({
      maxRunning: 1,
      launch: async () => {
        if (endless) return launchProbe();
        const server = await launchProbe();
        stopEndless = server.kill;
        endless = { ...server, kill: () => new Promise<void>(() => undefined) };
        return endless;
      },
    });
    let killed: Promise<void> | undefined;
    await pool.use(key('one', '0xA'), (server) => {
      killed = pool.discard(key('one', '0xA'), server);
      return Promise.resolve();
    });
    expect(pool.running()).to.deep.equal([]);
    expect(await instanceOf(key('two', '0xB'))).to.be.a('string');
    let ended = false;
    void killed?.then(() => (ended = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(ended, 'the first process is still being stopped').to.equal(false);
    await stopEndless?.();
  });

  it('discards only the process it is given, not one started since for the same key', async () => {
    pool = newPool();
    let first: RunningServer | undefined;
    await pool.use(key('probe'), (server) => Promise.resolve((first = server)));
    await pool.discard(key('probe'));
    const second = await instanceOf(key('probe'));
    await pool.discard(key('probe'), first);
    expect(await instanceOf(key('probe'))).to.equal(second);
  });

  it('gives a one-shot call a fresh process and stops it after', async () => {
    pool = newPool();
    const warm = await instanceOf(key('probe'));
    const once = (): Promise<string> =>
      pool.use(
        key('probe'),
        async (s) => textOf(await s.callTool('instance', {}, { timeoutMs: 10_000 })),
        true,
      );
    const [a, b] = await Promise.all([once(), once()]);
    expect(new Set([warm, a, b]).size).to.equal(3);
    expect(pool.running()).to.have.length(1);
  });
});
