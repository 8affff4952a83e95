import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import type { SseStream } from '../../../core/http/sse.ts';
import { PROOF_META_KEY } from '../../../services/gateway/proofs.ts';
import { GATEWAY_MCP_REVISION, type GatewayClient } from '../../../services/runtime/gateway-client.ts';
import type { SseEvent } from './chat-support.ts';

/** A stream that keeps what the chat sends it; its client never goes. */
export const recording = (events: SseEvent[]): SseStream => ({
  send: (event, data) => void events.push({ event, data: data as Record<string, unknown> }),
  sendJson: (batch) => {
    for (const { event, json, id } of batch)
      events.push({
        event,
        data: JSON.parse(json) as Record<string, unknown>,
        ...(id === undefined ? {} : { id }),
      });
  },
  close: () => undefined,
  signal: new AbortController().signal,
});

/** One tool of an in-process gateway: what it does when called, and whether the gateway "settled" it. */
export interface StubTool {
  run: () => Promise<void>;
  /** Its result carries an execution proof, as a call the gateway ran and settled: the chat bills it. */
  billed?: boolean;
}

/**
 * A gateway whose tools (`<server>__<tool>`, beside `gateway_enable_server`) run in this process: an
 * official-SDK v2 MCP server reached over HTTP's Request and Response, at the runtime's revision.
 * A tool's `run` decides when its call ends (the clock passes there, or a test holds it open).
 */
export function inProcessGateway(tools: Record<string, StubTool>): GatewayClient {
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'gateway', version: '1.0.0' });
    server.registerTool('gateway_enable_server', { description: 'enable' }, () => ({
      content: [{ type: 'text', text: 'enabled' }],
    }));
    for (const [name, tool] of Object.entries(tools))
      server.registerTool(name, { description: name }, async () => {
        await tool.run();
        return {
          content: [{ type: 'text', text: `${name} done` }],
          ...(tool.billed ? { _meta: { [PROOF_META_KEY]: { stub: true } } } : {}),
        };
      });
    return server;
  });
  return {
    toolClient: async (_path: unknown, _scope: unknown, signal: AbortSignal) => {
      const client = new Client(
        { name: 'sigil-runtime', version: '1.0.0' },
        { versionNegotiation: { mode: { pin: GATEWAY_MCP_REVISION } } },
      );
      await client.connect(
        new StreamableHTTPClientTransport(new URL('http://gateway.invalid/mcp'), {
          fetch: (url, init) => handler.fetch(new Request(url, init)),
        }),
        { signal },
      );
      return client;
    },
  } as unknown as GatewayClient;
}

/** A tool call a test holds open: `entered` once the call arrived, and it ends when `release` is called. */
export function heldOpen(): { run: () => Promise<void>; entered: Promise<void>; release: () => void } {
  let enter!: () => void;
  let release!: () => void;
  const entered = new Promise<void>((resolve) => (enter = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  return {
    run: () => {
      enter();
      return released;
    },
    entered,
    release,
  };
}
