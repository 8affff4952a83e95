import { spawn } from 'node:child_process';
import {
  ErrorCode,
  McpError,
  type CallToolResult,
  type JSONRPCMessage,
} from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { Client as ClientV2, type Transport } from '@modelcontextprotocol/client';
import { CallCancelled, callTool, isInputRequired } from '../../core/mcp/call-tool.ts';
import type { Disconnection } from '../../core/http/disconnect.ts';
import { ModernEnvelopes } from '../../core/mcp/era.ts';
import { ProcessStdioTransport } from '../../core/mcp/process-transport.ts';
import { fixturePath } from '../support/paths.ts';

/**
 * A stand-in MCP server (a real process on stdio): `echo` answers, `fail` answers a JSON-RPC error,
 * `bad` answers a result that is not a CallToolResult, `slow` never answers, `exit` ends the process.
 * Every notifications/cancelled it gets is told back as a notification, and a numeric-id request
 * (what the SDK's own requests use) is answered with its method.
 */
const SERVER = `
const send = (m) => process.stdout.write(JSON.stringify(m) + '\\n');
require('readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const m = JSON.parse(line);
  if (m.method === 'notifications/cancelled') return send({ jsonrpc: '2.0', method: 'test/cancelled', params: m.params });
  if (typeof m.id === 'number') return send({ jsonrpc: '2.0', id: m.id, result: { method: m.method } });
  const { name, arguments: args } = m.params;
  if (name === 'echo') send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: args.message }] } });
  if (name === 'fail') send({ jsonrpc: '2.0', id: m.id, error: { code: -32000, message: 'boom', data: { why: 1 } } });
  if (name === 'bad') send({ jsonrpc: '2.0', id: m.id, result: { content: 'not a list' } });
  if (name === 'exit') process.exit(0);
  // 2026-07-28 framing: the params it got as text, beside the server's identity and another _meta key.
  if (name === 'framed') send({ jsonrpc: '2.0', id: m.id, result: { resultType: 'complete',
    content: [{ type: 'text', text: JSON.stringify(m.params) }],
    _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'stand-in', version: '1' }, kept: true } } });
  if (name === 'ask') send({ jsonrpc: '2.0', id: m.id, result: { resultType: 'input_required', requestState: 's1',
    inputRequests: { who: { method: 'elicitation/create', params: { message: 'Who?' } } } } });
  if (name === 'ask-nothing') send({ jsonrpc: '2.0', id: m.id, result: { resultType: 'input_required' } });
  if (name === 'task') send({ jsonrpc: '2.0', id: m.id, result: { resultType: 'task', content: [] } });
});`;

function serve(args = ['-e', SERVER]): { transport: ProcessStdioTransport; others: JSONRPCMessage[] } {
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const transport = new ProcessStdioTransport({
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  });
  const others: JSONRPCMessage[] = [];
  transport.onmessage = (message) => others.push(message);
  return { transport, others };
}

/** A disconnection the test triggers. */
function manualDisconnection(): Disconnection & { go(): void } {
  const listeners: (() => void)[] = [];
  return { whenGone: (listener) => listeners.push(listener), go: () => listeners.forEach((l) => l()) };
}

const until = async (check: () => boolean) => {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
};

describe('callTool over a process transport (without the SDK Protocol)', () => {
  let server: ReturnType<typeof serve>;
  beforeEach(async () => {
    server = serve();
    await server.transport.start();
  });
  afterEach(() => server.transport.close());

  it('answers with the result, many calls at once, and the SDK’s own messages still reach it', async () => {
    const calls = Array.from({ length: 20 }, (_, i) =>
      callTool(server.transport, 'echo', { message: `m${i}` }, { timeoutMs: 5000 }),
    );
    await server.transport.send({ jsonrpc: '2.0', id: 7, method: 'ping' });
    const results = await Promise.all(calls);
    expect(results.map((r) => ((r as CallToolResult).content[0] as { text: string }).text)).to.deep.equal(
      Array.from({ length: 20 }, (_, i) => `m${i}`),
    );
    await until(() => server.others.length > 0);
    expect(server.others).to.deep.equal([{ jsonrpc: '2.0', id: 7, result: { method: 'ping' } }]);
  });

  it('turns a JSON-RPC error into an McpError with its code, message and data', async () => {
    const error = await callTool(server.transport, 'fail', {}, { timeoutMs: 5000 }).catch((e: unknown) => e);
    expect(error).to.be.instanceOf(McpError);
    expect((error as McpError).code).to.equal(-32000);
    expect((error as McpError).message).to.match(/boom/);
    expect((error as McpError).data).to.deep.equal({ why: 1 });
  });

  it('refuses a result that is not a CallToolResult', async () => {
    const outcome = await callTool(server.transport, 'bad', {}, { timeoutMs: 5000 }).then(
      () => 'resolved',
      (e: unknown) => e,
    );
    expect(outcome).to.be.instanceOf(Error).and.not.be.instanceOf(McpError);
  });

  it('times out with RequestTimeout and tells the server notifications/cancelled', async () => {
    const error = await callTool(server.transport, 'slow', {}, { timeoutMs: 100 }).catch((e: unknown) => e);
    expect(error).to.be.instanceOf(McpError).and.include({ code: ErrorCode.RequestTimeout });
    await until(() => server.others.length > 0);
    const told = server.others[0] as unknown as {
      method: string;
      params: { requestId: unknown; reason: string };
    };
    expect(told.method).to.equal('test/cancelled');
    expect(told.params.requestId).to.be.a('string');
    expect(told.params.reason).to.match(/timed out after 100 ms/);
  });

  it('ends with CallCancelled when the client goes away, and tells the server', async () => {
    const disconnection = manualDisconnection();
    const pending = callTool(server.transport, 'slow', {}, { timeoutMs: 5000, disconnection });
    disconnection.go();
    expect(await pending.catch((e: unknown) => e)).to.be.instanceOf(CallCancelled);
    await until(() => server.others.length > 0);
    expect((server.others[0] as { method: string }).method).to.equal('test/cancelled');
    // A call that already has its answer is not cancelled afterwards.
    const answered = manualDisconnection();
    await callTool(server.transport, 'echo', { message: 'x' }, { timeoutMs: 5000, disconnection: answered });
    answered.go();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(server.others).to.have.lengthOf(1);
  });

  it('ends pending calls with ConnectionClosed when the process ends, and later calls too', async () => {
    const pending = callTool(server.transport, 'slow', {}, { timeoutMs: 5000 });
    void callTool(server.transport, 'exit', {}, { timeoutMs: 5000 }).catch(() => undefined);
    expect(await pending.catch((e: unknown) => e))
      .to.be.instanceOf(McpError)
      .and.include({ code: ErrorCode.ConnectionClosed });
    expect(
      await callTool(server.transport, 'echo', {}, { timeoutMs: 5000 }).catch((e: unknown) => e),
    ).to.be.instanceOf(Error);
  });
});

describe('callTool to a 2026-07-28 server', () => {
  const envelopes = new ModernEnvelopes('2026-07-28', { name: 'sigil-gateway', version: 'test' });
  const framed = (result: unknown) =>
    JSON.parse(((result as CallToolResult).content[0] as { text: string }).text) as {
      _meta: Record<string, unknown>;
      inputResponses?: unknown;
      requestState?: unknown;
    };

  describe('against a stand-in', () => {
    let server: ReturnType<typeof serve>;
    beforeEach(async () => {
      server = serve();
      await server.transport.start();
    });
    afterEach(() => server.transport.close());

    it('sends the envelope (the caller’s capabilities, a log level only while someone listens) and a retry’s input', async () => {
      const plain = framed(await callTool(server.transport, 'framed', {}, { timeoutMs: 5000 }, envelopes));
      expect(plain._meta).to.deep.equal({
        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
        'io.modelcontextprotocol/clientCapabilities': {},
        'io.modelcontextprotocol/clientInfo': { name: 'sigil-gateway', version: 'test' },
      });
      const listening = framed(
        await callTool(
          server.transport,
          'framed',
          {},
          {
            timeoutMs: 5000,
            onLog: () => undefined,
            caller: { clientCapabilities: { sampling: {} } },
            retry: { inputResponses: { who: { action: 'decline' } }, requestState: 's1' },
          },
          envelopes,
        ),
      );
      expect(listening._meta).to.deep.include({
        'io.modelcontextprotocol/clientCapabilities': { sampling: {} },
        'io.modelcontextprotocol/logLevel': 'debug',
      });
      expect(listening._meta.progressToken).to.be.a('string');
      expect([listening.inputResponses, listening.requestState]).to.deep.equal([
        { who: { action: 'decline' } },
        's1',
      ]);
    });

    it('returns a complete result without its framing, keeping the rest of its _meta', async () => {
      const result = (await callTool(
        server.transport,
        'framed',
        {},
        { timeoutMs: 5000 },
        envelopes,
      )) as CallToolResult;
      expect(result).to.not.have.property('resultType');
      expect(result._meta).to.deep.equal({ kept: true });
    });

    it('returns input_required as it came, and refuses one that asks nothing or an unknown resultType', async () => {
      const asked = await callTool(server.transport, 'ask', {}, { timeoutMs: 5000 }, envelopes);
      expect(isInputRequired(asked)).to.equal(true);
      expect(asked).to.deep.equal({
        resultType: 'input_required',
        requestState: 's1',
        inputRequests: { who: { method: 'elicitation/create', params: { message: 'Who?' } } },
      });
      for (const name of ['ask-nothing', 'task']) {
        const refused = await callTool(server.transport, name, {}, { timeoutMs: 5000 }, envelopes).then(
          () => undefined,
          (err: unknown) => err,
        );
        expect(refused, name).to.be.instanceOf(Error);
      }
    });
  });

  it('answers as the SDK v2 client does, against an SDK v2 server: results, progress, logs, input_required and its retry', async function () {
    this.timeout(30_000);
    const server = serve([fixturePath('mcp', 'modern-echo-package', 'server.mjs')]);
    const client = new ClientV2(
      { name: 'sigil-gateway', version: 'test' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: {} } },
    );
    client.setRequestHandler('elicitation/create', () =>
      Promise.resolve({ action: 'accept' as const, content: { name: 'Ada' } }),
    );
    await client.connect(server.transport as unknown as Transport);
    try {
      const withoutIdentity = ({ _meta, ...rest }: Record<string, unknown>) => {
        const { 'io.modelcontextprotocol/serverInfo': _identity, ...others } = (_meta ?? {}) as Record<
          string,
          unknown
        >;
        return Object.keys(others).length === 0 ? rest : { ...rest, _meta: others };
      };
      const echoed = await callTool(
        server.transport,
        'echo',
        { message: 'same' },
        { timeoutMs: 5000 },
        envelopes,
      );
      expect(echoed).to.deep.equal(
        withoutIdentity(await client.callTool({ name: 'echo', arguments: { message: 'same' } })),
      );
      const heard: string[] = [];
      const done = await callTool(
        server.transport,
        'progress',
        {},
        {
          timeoutMs: 5000,
          onProgress: (progress) => heard.push(`progress ${progress.progress}/${String(progress.total)}`),
          onLog: (message) => heard.push(`log ${message.level}`),
        },
        envelopes,
      );
      expect(done).to.deep.equal(withoutIdentity(await client.callTool({ name: 'progress', arguments: {} })));
      expect(heard).to.deep.equal(['progress 1/2', 'progress 2/2', 'log info']);
      const caller = { clientCapabilities: { elicitation: {} } };
      const asked = await callTool(server.transport, 'greet', {}, { timeoutMs: 5000, caller }, envelopes);
      if (!isInputRequired(asked)) throw new Error('expected input_required');
      expect(asked.inputRequests?.user_name?.method).to.equal('elicitation/create');
      const answered = await callTool(
        server.transport,
        'greet',
        {},
        {
          timeoutMs: 5000,
          caller,
          retry: {
            inputResponses: { user_name: { action: 'accept', content: { name: 'Ada' } } },
            ...(asked.requestState !== undefined && { requestState: asked.requestState }),
          },
        },
        envelopes,
      );
      // The SDK client fulfils the same request with its handler and retries: the same result.
      expect(answered).to.deep.equal(
        withoutIdentity(await client.callTool({ name: 'greet', arguments: {} })),
      );
    } finally {
      await client.close();
    }
  });
});
