/**
 * The floor of the gateway's throughput: a bare `node:http` JSON-RPC relay to one warm MCP server.
 * Each POSTed JSON-RPC request is forwarded to the server's stdio under an id of the relay's own (so
 * concurrent requests can share the one stdio), and the answer goes back with the caller's id. Nothing
 * else happens: no auth, no checks, no logging, no schema validation. Whatever the gateway does beyond
 * this is its own cost.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import type { ProcessStdio } from '../core/mcp/process-transport.ts';

interface Message {
  jsonrpc: '2.0';
  id?: string | number | null;
  method?: string;
  [key: string]: unknown;
}

export interface Relay {
  url: string;
  close(): Promise<void>;
}

/** Initializes the server over `stdio`, then relays HTTP POSTs to it until closed. */
export async function startRelay(stdio: ProcessStdio): Promise<Relay> {
  const pending = new Map<number, (answer: Message) => void>();
  let nextId = 0;
  const decoder = new StringDecoder('utf8');
  let buffered = '';
  stdio.stdout.on('data', (chunk: Buffer) => {
    buffered += decoder.write(chunk);
    for (let newline = buffered.indexOf('\n'); newline >= 0; newline = buffered.indexOf('\n')) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (line.trim() === '') continue;
      const answer = JSON.parse(line) as Message;
      const waiting = typeof answer.id === 'number' ? pending.get(answer.id) : undefined;
      if (!waiting) continue; // notifications and logging from the server
      pending.delete(answer.id as number);
      waiting(answer);
    }
  });
  const send = (message: Message): Promise<Message> =>
    new Promise((resolve) => {
      nextId += 1;
      pending.set(nextId, resolve);
      stdio.stdin.write(`${JSON.stringify({ ...message, id: nextId })}\n`);
    });

  const init = await send({
    jsonrpc: '2.0',
    method: 'initialize',
    params: {
      protocolVersion: LATEST_PROTOCOL_VERSION,
      capabilities: {},
      clientInfo: { name: 'bench-relay', version: '1.0.0' },
    },
  });
  if (!('result' in init)) throw new Error(`the server refused initialize: ${JSON.stringify(init)}`);
  stdio.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })}\n`);

  const answer = (res: ServerResponse, status: number, body: string) => {
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      let message: Message;
      try {
        message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Message;
      } catch {
        answer(res, 400, '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}');
        return;
      }
      const callerId = message.id;
      void send(message).then((reply) => answer(res, 200, JSON.stringify({ ...reply, id: callerId })));
    });
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
