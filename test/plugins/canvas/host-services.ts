import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Ajv } from 'ajv';
import { z } from 'zod';
import {
  type CanvasLlmRequestV2,
  type CanvasLlmResultV2,
  type CanvasNodeV2,
  type CanvasServicesV2,
  type PluginManifest,
  SigilError,
} from '@sigil/plugin-api';
import type { StandIn } from '@sigil/plugin-api/llm/stand-in';
import { quietLogger } from '../../support/kernel.ts';

/**
 * The host's services for canvas node tests, over real parts: `llm` over the local stand-in LLM's
 * OpenAI wire, `callTool` and `listTools` over official-SDK MCP servers in process. They behave as the
 * runtime's do (services/runtime/canvas/host-services.ts): the system and the prompt are a
 * conversation's two messages, and with a schema the answer must be JSON valid against it, else
 * `unavailable` with reason `llm_output_invalid`.
 */

/**
 * The kit checks that do not apply to a `reads` node whose example needs a model turn or a gateway
 * tool, which the kit's host refuses: those that need the example to succeed, and the `writes` ones.
 */
export const NOT_APPLICABLE_TO_HOSTED_READS = [
  'canvas-node.run-outputs',
  'canvas-node.log',
  'canvas-node.no-secret',
  'canvas-node.writes-need-approval',
  'canvas-node.writes-once',
];

export interface StandInLlm {
  llm: CanvasServicesV2['llm'];
  /** Every request the node made, in order. */
  requests: CanvasLlmRequestV2[];
}

/** `llm` over `standIn` (its echo model by default); `answer` may rewrite an answer before it is checked. */
export function standInLlm(
  standIn: StandIn,
  answer: (text: string, request: CanvasLlmRequestV2) => string = (text) => text,
): StandInLlm {
  const requests: CanvasLlmRequestV2[] = [];
  const llm = async (request: CanvasLlmRequestV2, signal: AbortSignal): Promise<CanvasLlmResultV2> => {
    requests.push(request);
    const model = request.model ?? 'sigil-echo';
    const response = await fetch(`${standIn.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer canvas-test-key', 'content-type': 'application/json' },
      body: JSON.stringify({
        model,
        messages: [
          ...(request.system !== undefined ? [{ role: 'system', content: request.system }] : []),
          { role: 'user', content: request.prompt },
        ],
        ...(request.maxOutputTokens !== undefined ? { max_tokens: request.maxOutputTokens } : {}),
      }),
      signal,
    });
    if (!response.ok)
      throw new SigilError('unavailable', `the model answered ${response.status}`, {
        details: { reason: 'upstream_error' },
      });
    const body = (await response.json()) as {
      choices: [{ message: { content: string } }];
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    const text = answer(body.choices[0].message.content, request);
    const usage = {
      model,
      inputTokens: body.usage.prompt_tokens,
      outputTokens: body.usage.completion_tokens,
    };
    if (request.schema === undefined) return { text, ...usage };
    return { text, json: structuredAnswer(text, request.schema), ...usage };
  };
  return { llm, requests };
}

const ajv = new Ajv({ strict: false });

/** The answer as JSON valid against the schema, checked as the runtime's host checks it (Ajv). */
function structuredAnswer(text: string, schema: Record<string, unknown>): unknown {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw invalidAnswer('The model did not answer with JSON');
  }
  const validate = ajv.compile(schema);
  if (!validate(json))
    throw invalidAnswer(`The model's JSON does not match the schema: ${ajv.errorsText(validate.errors)}`);
  return json;
}

const invalidAnswer = (message: string) =>
  new SigilError('unavailable', message, { details: { reason: 'llm_output_invalid' } });

/** The test tools server: `echo` (its text back), `add` (a structured sum), `fail` (an error result). */
export function toolServer(): McpServer {
  const server = new McpServer({ name: 'canvas-test-tools', version: '1.0.0' });
  server.registerTool(
    'echo',
    { description: 'Answers its text', inputSchema: { text: z.string() } },
    ({ text }) => ({ content: [{ type: 'text', text }] }),
  );
  server.registerTool(
    'add',
    {
      description: 'Adds two numbers',
      inputSchema: { a: z.number(), b: z.number() },
      outputSchema: { sum: z.number() },
    },
    ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } }),
  );
  server.registerTool(
    'fail',
    { description: 'Always fails', inputSchema: { why: z.string() } },
    ({ why }) => ({
      content: [{ type: 'text', text: `failed: ${why}` }],
      isError: true,
    }),
  );
  return server;
}

export interface McpGateway extends Pick<CanvasServicesV2, 'callTool' | 'listTools'> {
  /** Every call, in order. */
  calls: { server: string; tool: string; arguments: Record<string, unknown> }[];
  close(): Promise<void>;
}

/** `callTool` and `listTools` over MCP servers by gateway server id, each connected by an SDK client. */
export async function mcpGateway(servers: Record<string, McpServer>): Promise<McpGateway> {
  const clients = new Map<string, Client>();
  for (const [id, server] of Object.entries(servers)) {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const client = new Client({ name: 'canvas-test-host', version: '1.0.0' });
    await client.connect(clientSide);
    clients.set(id, client);
  }
  const clientOf = (server: string): Client => {
    const client = clients.get(server);
    if (!client)
      throw new SigilError('not_found', `No gateway server ${server}`, {
        details: { reason: 'server_unknown' },
      });
    return client;
  };
  const calls: McpGateway['calls'] = [];
  return {
    calls,
    callTool: async (request, signal) => {
      calls.push(request);
      const result = await clientOf(request.server).callTool(
        { name: request.tool, arguments: request.arguments },
        undefined,
        { signal },
      );
      const content = (result.content ?? []) as { type: string; text?: string }[];
      return {
        text: content.flatMap((part) => (part.type === 'text' ? [part.text ?? ''] : [])).join('\n'),
        ...(result.structuredContent
          ? { structuredContent: result.structuredContent as Record<string, unknown> }
          : {}),
        isError: result.isError === true,
      };
    },
    listTools: async (ids, signal) => {
      const lists = await Promise.all(
        ids.map(async (server) => {
          const { tools } = await clientOf(server).listTools(undefined, { signal });
          return tools.map((tool) => ({
            server,
            name: tool.name,
            ...(tool.description !== undefined ? { description: tool.description } : {}),
            inputSchema: tool.inputSchema,
          }));
        }),
      );
      return lists.flat();
    },
    close: async () => {
      await Promise.all([...clients.values()].map((client) => client.close()));
    },
  };
}

/** The node a canvas-node plugin's factory makes with its default options, as the plugin host would. */
export async function nodeOf(manifest: PluginManifest<'canvas-node', 'v2'>): Promise<CanvasNodeV2> {
  return manifest.create({ config: manifest.config.parse({}), deps: {}, logger: quietLogger() });
}
