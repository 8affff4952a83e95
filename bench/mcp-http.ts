/**
 * An MCP client's HTTP steps the benchmarks share (the load generator and the start-up timings): one
 * request over a given agent, and the session handshake a client makes once per connection.
 */
import { request, type Agent, type IncomingHttpHeaders } from 'node:http';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/** A handshake step answered with something else than the protocol's answer. */
export class HandshakeRefused extends Error {
  constructor(
    readonly step: 'initialize' | 'notifications/initialized',
    readonly url: string,
    readonly answer: Answer,
  ) {
    super(`${step} at ${url}: ${answer.status} ${answer.text.slice(0, 500)}`);
  }
}

/** One request over `agent`, its whole answer read. */
export function send(
  url: string,
  agent: Agent,
  method: string,
  headers: Record<string, string | number>,
  body?: Buffer,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text: Buffer.concat(chunks).toString('utf8'),
        }),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** POSTs `message` as JSON with `headers`. */
export function postJson(url: string, agent: Agent, headers: Record<string, string>, message: object) {
  const body = Buffer.from(JSON.stringify(message));
  return send(
    url,
    agent,
    'POST',
    { ...headers, 'content-type': 'application/json', 'content-length': body.length },
    body,
  );
}

/**
 * `initialize`, then `notifications/initialized`, over `agent`: the session id a stateful server
 * answers with (its later requests must carry it), or undefined from a stateless one.
 */
export async function initializeSession(
  url: string,
  agent: Agent,
  headers: Record<string, string>,
): Promise<string | undefined> {
  const initialized = await postJson(url, agent, headers, {
    jsonrpc: '2.0',
    id: 0,
    method: 'initialize',
    params: {
      protocolVersion: LATEST_PROTOCOL_VERSION,
      capabilities: {},
      clientInfo: { name: 'bench', version: '1.0.0' },
    },
  });
  if (initialized.status !== 200 || !initialized.text.includes('"result"'))
    throw new HandshakeRefused('initialize', url, initialized);
  const session = initialized.headers['mcp-session-id'];
  const sessionId = typeof session === 'string' ? session : undefined;
  const notified = await postJson(
    url,
    agent,
    { ...headers, ...(sessionId === undefined ? {} : { 'mcp-session-id': sessionId }) },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
  );
  if (notified.status !== 202) throw new HandshakeRefused('notifications/initialized', url, notified);
  return sessionId;
}
