import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { SigilConfig } from '../../../services/config.ts';
import { CallerLimits } from '../../../services/gateway/call-limits.ts';
import { MODERN_RETRY_LATER_CODES, RETRY_LATER_CODES } from '../../../core/http/mcp-errors.ts';
import { RetryLater } from '../../../services/gateway/retry-later.ts';
import { modernMeta, MODERN_REVISION, probeEntry, ProbeWorld, textOf, walletToken } from './support.ts';
import type { ConfigOverrides } from '../../support/kernel.ts';

type Gateway = Awaited<ReturnType<ProbeWorld['gateway']>>;

interface Answer {
  status: number;
  retryAfter: string | null;
  body: Record<string, unknown>;
}

/**
 * Aborts the test's calls still in flight (the hanging ones) before its gateway stops: the stop would
 * otherwise wait out its 10 s grace for their answers.
 */
let callsOfTheTest = new AbortController();

/** POST /api/servers/:id/tools/:tool, with a wallet token or anonymous, and extra headers. */
async function rest(
  url: string,
  serverId: string,
  tool: string,
  args: Record<string, unknown>,
  token?: string,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await fetch(`${url}/api/servers/${serverId}/tools/${tool}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body: JSON.stringify({ arguments: args }),
    signal: callsOfTheTest.signal,
  });
  return {
    status: res.status,
    retryAfter: res.headers.get('retry-after'),
    body: (await res.json()) as Record<string, unknown>,
  };
}

/** tools/call on POST /mcp/server/:id, at 2025-11-25 or (`modern`) 2026-07-28: the JSON-RPC answer. */
async function mcp(
  url: string,
  serverId: string,
  tool: string,
  args: Record<string, unknown>,
  token?: string,
  modern = false,
  headers: Record<string, string> = {},
): Promise<{ result?: Record<string, unknown>; error?: { code: number; message: string; data?: unknown } }> {
  const res = await fetch(`${url}/mcp/server/${serverId}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
      ...(modern && {
        'mcp-protocol-version': MODERN_REVISION,
        'mcp-method': 'tools/call',
        'mcp-name': tool,
      }),
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: tool, arguments: args, ...(modern && { _meta: modernMeta() }) },
    }),
    signal: callsOfTheTest.signal,
  });
  expect(res.status).to.equal(200);
  return (await res.json()) as { result?: Record<string, unknown> };
}

const HANG = { ms: 600_000 };

/**
 * Sends a call for a caller whose limit is one call in flight, and waits until the gateway counts it:
 * until the caller's next call (`sense`) is refused. A sensor call counted first has the call refused:
 * it is sent again. Returns the call's answer to come.
 */
async function inFlight(
  send: () => Promise<Answer>,
  sense: () => Promise<Answer>,
): Promise<{ answer: Promise<Answer> }> {
  let refused = false;
  const sendCall = () => {
    refused = false;
    const call = send();
    // A hanging call ends only when its gateway stops: that rejection is expected, not a failure.
    void call.then(
      (answer) => (refused = answer.status === 429),
      () => undefined,
    );
    return call;
  };
  let call = sendCall();
  for (;;) {
    const sensor = await sense();
    // In an object: an async function returning a promise would wait for it.
    if (sensor.status === 429) return { answer: call };
    if (refused) call = sendCall();
  }
}

/** One call in flight per caller; the rest as given. */
const limits = (
  settings: Partial<SigilConfig['gateway']['callLimits']> = {},
): SigilConfig['gateway']['callLimits'] => ({
  perWallet: 1,
  perAnonymousClient: 1,
  queueLength: 8,
  queueWaitSeconds: 30,
  ...settings,
});

describe('gateway call limits (a real gateway, the probe and server-memory in the sandbox)', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let catalogFile: string;
  let gateway: Gateway | undefined;

  before(async () => {
    world = await ProbeWorld.start();
    catalogFile = join(world.dir, 'limits-catalog.json');
    writeFileSync(
      catalogFile,
      JSON.stringify({
        servers: [
          { id: 'slow-a', ...probeEntry },
          { id: 'slow-b', ...probeEntry },
          { id: 'slow-c', ...probeEntry },
          { id: 'quick', ...probeEntry, toolCallTimeoutSeconds: 2 },
          { id: 'probe-stateful', ...probeEntry, stateless: false },
          {
            id: 'memory',
            title: 'Knowledge graph memory',
            registry: 'npm',
            package: '@modelcontextprotocol/server-memory',
            version: '2026.8.31',
            entry: { bin: 'mcp-server-memory' },
            env: { MEMORY_FILE_PATH: '/tmp/memory.jsonl' },
            smokeTest: { tool: 'read_graph', arguments: {} },
          },
        ],
      }),
    );
  });
  after(() => world.stop());
  afterEach(async () => {
    callsOfTheTest.abort();
    callsOfTheTest = new AbortController();
    await gateway?.stop();
    gateway = undefined;
  });

  const start = async (settings: ConfigOverrides['gateway']): Promise<string> => {
    gateway = await world.gateway(undefined, { catalogFile, warmupAtStart: false, ...settings });
    return gateway.url;
  };

  /** Starts a call that hangs (its answer never comes) and waits until the gateway counts it. */
  const hang = (url: string, serverId: string, token?: string, headers?: Record<string, string>) =>
    inFlight(
      () => rest(url, serverId, 'sleep', HANG, token, headers),
      () => rest(url, serverId, 'echo', { message: 'sensor' }, token, headers),
    );

  describe('the free denial of service: calls that hang hold every process', () => {
    it('one wallet hanging calls on every server cannot keep another wallet from being served', async () => {
      const url = await start({ maxRunningServers: 2, callLimits: limits() });
      const attacker = (await walletToken(url)).token;
      const victim = (await walletToken(url)).token;
      // The attacker's first call holds one process; its next, on another server, is over its limit.
      await hang(url, 'slow-a', attacker);
      const second = await rest(url, 'slow-b', 'sleep', HANG, attacker);
      expect(second.status).to.equal(429);
      expect(second.retryAfter).to.equal('1');
      expect(second.body).to.include({ code: 'rate_limited' });
      expect(second.body.details).to.deep.equal({ retryAfterSeconds: 1 });
      const served = await rest(url, 'slow-c', 'echo', { message: 'still served' }, victim);
      expect(served.status).to.equal(200);
      expect(textOf(served.body)).to.equal('still served');
    });

    it('answers 429 over MCP as a JSON-RPC error with data.retryAfterSeconds (-32029; 429 at 2026-07-28)', async () => {
      const url = await start({ callLimits: limits() });
      const { token } = await walletToken(url);
      await hang(url, 'slow-a', token);
      const refused = await mcp(url, 'slow-a', 'echo', { message: 'one too many' }, token);
      expect(refused.error).to.include({ code: RETRY_LATER_CODES.rate_limited });
      expect(refused.error?.data).to.deep.equal({ code: 'rate_limited', retryAfterSeconds: 1 });
      // 2026-07-28 reserves -32020…-32099 for the spec's codes.
      const modern = await mcp(url, 'slow-a', 'echo', { message: 'one too many' }, token, true);
      expect(modern.error).to.include({
        code: MODERN_RETRY_LATER_CODES.rate_limited,
        message: refused.error?.message,
      });
      expect(modern.error?.data).to.deep.equal({ code: 'rate_limited', retryAfterSeconds: 1 });
    });

    it('queues a call for a busy gateway, then answers 503 with Retry-After when the wait runs out or the queue is full', async () => {
      const url = await start({
        maxRunningServers: 1,
        callLimits: limits({ queueLength: 1, queueWaitSeconds: 2 }),
      });
      const [a, b, c] = await Promise.all([walletToken(url), walletToken(url), walletToken(url)]);
      await hang(url, 'slow-a', a.token);
      const queued = await inFlight(
        () => rest(url, 'slow-b', 'echo', { message: 'queued' }, b.token),
        () => rest(url, 'slow-b', 'echo', { message: 'sensor' }, b.token),
      );
      const full = await rest(url, 'slow-b', 'echo', { message: 'no room to wait' }, c.token);
      expect(full.status).to.equal(503);
      expect(full.retryAfter).to.equal('2');
      expect(full.body).to.include({ code: 'unavailable' });
      const waited = await queued.answer;
      expect(waited.status).to.equal(503);
      expect(waited.retryAfter).to.equal('2');
      const overMcp = await mcp(url, 'slow-b', 'echo', { message: 'over MCP' }, b.token);
      expect(overMcp.error).to.include({ code: RETRY_LATER_CODES.unavailable });
      expect(overMcp.error?.data).to.deep.equal({ code: 'unavailable', retryAfterSeconds: 2 });
      const overModern = await mcp(url, 'slow-b', 'echo', { message: 'over MCP' }, b.token, true);
      expect(overModern.error).to.include({ code: MODERN_RETRY_LATER_CODES.unavailable });
      expect(overModern.error?.data).to.deep.equal({ code: 'unavailable', retryAfterSeconds: 2 });
    });

    it('serves a queued call as soon as a process is free', async () => {
      const url = await start({ maxRunningServers: 1, callLimits: limits({ queueWaitSeconds: 60 }) });
      const [a, b] = await Promise.all([walletToken(url), walletToken(url)]);
      const first = await inFlight(
        () => rest(url, 'slow-a', 'sleep', { ms: 3000 }, a.token),
        () => rest(url, 'slow-a', 'echo', { message: 'sensor' }, a.token),
      );
      const queued = await rest(url, 'slow-b', 'echo', { message: 'after the wait' }, b.token);
      expect(queued.status).to.equal(200);
      expect(textOf(queued.body)).to.equal('after the wait');
      expect((await first.answer).status).to.equal(200);
    });

    it('cuts a call off at its server’s own time limit and frees its process for the next caller at once', async () => {
      const url = await start({
        maxRunningServers: 1,
        toolCallTimeoutSeconds: 60,
        // No waiting: the next call is served only if the slot is free when it arrives.
        callLimits: limits({ queueLength: 0, queueWaitSeconds: 0 }),
      });
      const [a, b] = await Promise.all([walletToken(url), walletToken(url)]);
      expect((await rest(url, 'quick', 'echo', { message: 'warm' }, a.token)).status).to.equal(200);
      const timedOut = await rest(url, 'quick', 'sleep', HANG, a.token);
      expect(timedOut.status).to.equal(200);
      expect(timedOut.body.isError).to.equal(true);
      expect(textOf(timedOut.body)).to.equal('Tool "sleep" timed out after 2000 ms; the server was stopped');
      const next = await rest(url, 'slow-a', 'echo', { message: 'next' }, b.token);
      expect(next.status, JSON.stringify(next.body)).to.equal(200);
    });

    it('refuses a catalog server whose time limit is over the gateway’s maximum, at start-up', async () => {
      const err = await start({ maxToolCallTimeoutSeconds: 1 }).catch((e: unknown) => e);
      expect(err).to.include({ code: 'config_invalid' });
      expect((err as Error).message).to.match(
        /"slow-a" sets toolCallTimeoutSeconds 60|toolCallTimeoutSeconds \(60\)/,
      );
    });
  });

  describe('anonymous callers', () => {
    it('share no state: each anonymous call to a server not declared stateless has a fresh process', async () => {
      const url = await start({});
      const stored = await rest(url, 'memory', 'create_entities', {
        entities: [{ name: 'canary-7f3a', entityType: 'secret', observations: ['anonymous caller one'] }],
      });
      expect(stored.status, JSON.stringify(stored.body)).to.equal(200);
      expect(stored.body.isError).to.not.equal(true);
      const read = await rest(url, 'memory', 'read_graph', {});
      expect(read.status).to.equal(200);
      expect(JSON.stringify(read.body)).to.not.include('canary-7f3a');
      const first = textOf((await rest(url, 'probe-stateful', 'instance', {})).body);
      const second = textOf((await rest(url, 'probe-stateful', 'instance', {})).body);
      expect(second).to.not.equal(first);
    });

    it('a wallet keeps its own process and its state; a stateless server’s process is shared by anonymous calls', async () => {
      const url = await start({});
      const { token } = await walletToken(url);
      await rest(
        url,
        'memory',
        'create_entities',
        { entities: [{ name: 'kept-by-wallet', entityType: 'note', observations: ['mine'] }] },
        token,
      );
      expect(JSON.stringify((await rest(url, 'memory', 'read_graph', {}, token)).body)).to.include(
        'kept-by-wallet',
      );
      const first = textOf((await rest(url, 'slow-a', 'instance', {})).body);
      expect(textOf((await rest(url, 'slow-a', 'instance', {})).body)).to.equal(first);
    });

    it('limits calls in flight per client address, and per forwarded client behind a trusted proxy (REST and MCP)', async () => {
      let url = await start({ callLimits: limits() });
      await hang(url, 'slow-a');
      const spoofed = { 'x-forwarded-for': '203.0.113.9' };
      const refused = await rest(url, 'slow-a', 'echo', { message: 'second' }, undefined, spoofed);
      expect(refused.status, 'X-Forwarded-For from an untrusted peer is ignored').to.equal(429);
      const overMcp = await mcp(url, 'slow-a', 'echo', { message: 'second' }, undefined, false, spoofed);
      expect(overMcp.error, 'and on the MCP lane').to.include({ code: RETRY_LATER_CODES.rate_limited });
      await gateway?.stop();

      url = await start({ callLimits: limits(), http: { trustedProxies: ['127.0.0.0/8'] } });
      const from = (client: string) => ({ 'x-forwarded-for': `${client}, 127.0.0.1` });
      await hang(url, 'slow-a', undefined, from('203.0.113.7'));
      const other = await rest(
        url,
        'slow-a',
        'echo',
        { message: 'another client' },
        undefined,
        from('203.0.113.8'),
      );
      expect(other.status).to.equal(200);
      const same = await rest(
        url,
        'slow-a',
        'echo',
        { message: 'the same client' },
        undefined,
        from('203.0.113.7'),
      );
      expect(same.status).to.equal(429);
      const sameOverMcp = await mcp(
        url,
        'slow-a',
        'echo',
        { message: 'the same' },
        undefined,
        false,
        from('203.0.113.7'),
      );
      expect(sameOverMcp.error).to.include({ code: RETRY_LATER_CODES.rate_limited });
      const otherOverMcp = await mcp(
        url,
        'slow-a',
        'echo',
        { message: 'another' },
        undefined,
        false,
        from('203.0.113.8'),
      );
      expect(otherOverMcp.error).to.equal(undefined);
      expect(JSON.stringify(otherOverMcp.result)).to.include('another');
    });
  });
});

describe('gateway call limits: who an anonymous client is', () => {
  const origin = (clientAddress: string) => ({ clientAddress });
  const limits = () => new CallerLimits({ perWallet: 2, perAnonymousClient: 1 });

  it('is the client address; an IPv4 one as such on a dual-stack socket; an IPv6 one by its /64', () => {
    const caller = limits();
    expect(caller.clientOf(origin('203.0.113.9'))).to.equal('203.0.113.9');
    expect(caller.clientOf(origin('::ffff:203.0.113.9'))).to.equal('203.0.113.9');
    expect(caller.clientOf(origin('2001:db8:0:12:a:b:c:d'))).to.equal('2001:db8:0:12::/64');
    expect(caller.clientOf(origin('2001:db8::1'))).to.equal('2001:db8:0:0::/64');
    expect(caller.clientOf(origin('2001:db8::2'))).to.equal(caller.clientOf(origin('2001:db8:0:0:ffff::9')));
    expect(caller.clientOf(origin('::1'))).to.equal('0:0:0:0::/64');
  });

  it('counts calls in flight per caller and refuses one over the limit with a RetryLater, until one ends', () => {
    const caller = limits();
    const wallet = '0x1111111111111111111111111111111111111111';
    const a = caller.admit(wallet, undefined);
    caller.admit(wallet, undefined);
    const refused = (() => {
      try {
        caller.admit(wallet, undefined);
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    expect(refused).to.be.instanceOf(RetryLater);
    expect(refused).to.include({ code: 'rate_limited', retryAfterSeconds: 1 });
    caller.release(a);
    expect(caller.admit(wallet, undefined)).to.equal(wallet);
    expect(caller.admit(undefined, origin('203.0.113.9'))).to.equal('203.0.113.9');
    expect(() => caller.admit(undefined, origin('::ffff:203.0.113.9'))).to.throw(RetryLater);
  });
});
