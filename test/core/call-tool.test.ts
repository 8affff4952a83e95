import { spawn } from 'node:child_process';
import { ErrorCode, McpError, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { CallCancelled, callTool } from '../../core/mcp/call-tool.ts';
import type { Disconnection } from '../../core/http/disconnect.ts';
import { ProcessStdioTransport } from '../../core/mcp/process-transport.ts';

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
});`;

function serve(): { transport: ProcessStdioTransport; others: JSONRPCMessage[] } {
  const child = spawn(process.execPath, ['-e', SERVER], { stdio: ['pipe', 'pipe', 'pipe'] });
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
    expect(results.map((r) => (r.content[0] as { text: string }).text)).to.deep.equal(
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
