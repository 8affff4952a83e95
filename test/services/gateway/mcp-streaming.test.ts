import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  LoggingMessageNotificationSchema,
  McpError,
  type LoggingMessageNotificationParams,
  type Progress,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { PROOF_META_KEY } from '../../../services/gateway/proofs.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { EVERYTHING } from '../../registries/npm/support.ts';
import { everythingEntry, postMcp, postModern, ProbeWorld, textOf, walletToken } from './support.ts';

type Message = { method?: string; params?: Record<string, unknown>; result?: Record<string, unknown> };

/** The messages of an MCP answer: the events of a stream, or the one JSON response. */
async function messagesOf(res: Response): Promise<Message[]> {
  const text = await res.text();
  if (!res.headers.get('content-type')?.startsWith('text/event-stream')) return [JSON.parse(text) as Message];
  return text
    .split('\n\n')
    .flatMap((event) => event.split('\n').filter((line) => line.startsWith('data: ')))
    .map((line) => JSON.parse(line.slice('data: '.length)) as Message);
}

/**
 * What an MCP client notices while a call runs: the server's progress and log messages, and a changed
 * tool list, reach it in the POST's event stream; tools the stateless gateway cannot run are not
 * listed. Against @modelcontextprotocol/server-everything in the sandbox, with the official SDK client.
 */
describe('gateway MCP: event streams, list changes, task-only tools (server-everything)', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  before(async () => {
    world = await ProbeWorld.start({
      packages: [{ spec: `${EVERYTHING.name}@${EVERYTHING.version}` }],
      servers: [everythingEntry],
    });
  });
  after(() => world.stop());

  for (const database of TEST_DATABASES) {
    describe(`on ${database.name}`, () => {
      let serving: Serving & { url: string };
      let token: string;
      let client: Client;
      /** Each tool list the client fetched because the gateway said it changed. */
      const changedLists: Tool[][] = [];
      let listChanged: () => void = () => undefined;

      before(async () => {
        serving = await world.gateway(database);
        token = (await walletToken(serving.url)).token;
        client = new Client(
          { name: 'sigil-test', version: '1.0.0' },
          {
            listChanged: {
              tools: {
                debounceMs: 0,
                onChanged: (error, tools) => {
                  if (error) throw error;
                  changedLists.push(tools ?? []);
                  listChanged();
                },
              },
            },
          },
        );
        await client.connect(
          new StreamableHTTPClientTransport(new URL(`${serving.url}/mcp`), {
            requestInit: { headers: { authorization: `Bearer ${token}`, 'x-mcp-session': 'stream' } },
          }),
        );
      });
      after(async () => {
        await client?.close();
        await serving?.stop();
      });

      it('initialize advertises tools.listChanged and logging, and neither resources nor prompts', () => {
        const capabilities = client.getServerCapabilities();
        expect(capabilities).to.deep.equal({ tools: { listChanged: true }, logging: {} });
      });

      it('enabling a server sends notifications/tools/list_changed in the stream: the SDK re-lists its tools', async () => {
        const relisted = new Promise<void>((resolve) => (listChanged = resolve));
        // The first enable installs and verifies the server: longer than the SDK's default 60 s wait.
        const enabled = await client.callTool(
          { name: 'gateway_enable_server', arguments: { serverId: 'everything' } },
          undefined,
          { timeout: 170_000 },
        );
        expect(enabled.isError, textOf(enabled)).to.not.equal(true);
        await relisted;
        expect(changedLists.at(-1)?.map((tool) => tool.name)).to.include('everything__echo');
        // Enabling it again changes nothing, so nothing is announced.
        const before = changedLists.length;
        await client.callTool({ name: 'gateway_enable_server', arguments: { serverId: 'everything' } });
        await client.ping();
        expect(changedLists.length).to.equal(before);
      });

      it('forwards the progress of trigger-long-running-operation under the client token, then the result', async () => {
        const reports: Progress[] = [];
        const result = await client.callTool(
          { name: 'everything__trigger-long-running-operation', arguments: { duration: 0.3, steps: 3 } },
          undefined,
          { onprogress: (progress) => reports.push(progress) },
        );
        expect(textOf(result)).to.equal('Long running operation completed. Duration: 0.3 seconds, Steps: 3.');
        expect(reports).to.deep.equal([1, 2, 3].map((progress) => ({ progress, total: 3 })));
        expect(result._meta?.[PROOF_META_KEY], 'the proof').to.be.an('object');
      });

      it('forwards a log message the server sends while the call runs (toggle-simulated-logging)', async () => {
        const messages: LoggingMessageNotificationParams[] = [];
        client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
          messages.push(notification.params);
        });
        const started = await client.callTool({
          name: 'everything__toggle-simulated-logging',
          arguments: {},
        });
        expect(textOf(started)).to.match(/^Started simulated/);
        expect(messages).to.have.length(1);
        expect(messages[0]?.data).to.match(/-level message$|level-message$/);
        const stopped = await client.callTool({
          name: 'everything__toggle-simulated-logging',
          arguments: {},
        });
        expect(textOf(stopped)).to.match(/^Stopped simulated/);
      });

      it('at 2026-07-28: log messages only at or above the level the request names, none without one; progress as before; no list_changed', async () => {
        const auth = { authorization: `Bearer ${token}`, 'x-mcp-session': 'stream' };
        const call = async (
          name: string,
          args: Record<string, unknown>,
          meta: Record<string, unknown> = {},
        ) =>
          messagesOf(
            await postModern(
              `${serving.url}/mcp`,
              { method: 'tools/call', params: { name, arguments: args } },
              { meta, headers: auth },
            ),
          );
        const methods = (messages: Message[]) => messages.flatMap((m) => (m.method ? [m.method] : []));
        const toggle = 'everything__toggle-simulated-logging';
        // No level named: the spec forbids notifications/message.
        const quiet = await call(toggle, {});
        expect(textOf(quiet.at(-1)?.result)).to.match(/^Started simulated/);
        expect(quiet.at(-1)?.result).to.include({ resultType: 'complete' });
        expect(methods(quiet)).to.deep.equal([]);
        expect(textOf((await call(toggle, {})).at(-1)?.result)).to.match(/^Stopped simulated/);
        // Every level is at or above debug.
        const logged = await call(toggle, {}, { 'io.modelcontextprotocol/logLevel': 'debug' });
        expect(methods(logged)).to.deep.equal(['notifications/message']);
        expect(textOf((await call(toggle, {})).at(-1)?.result)).to.match(/^Stopped simulated/);
        // At "error", the server's random-leveled messages below it are held back.
        for (let round = 0; round < 4; round += 1) {
          const severe = await call(toggle, {}, { 'io.modelcontextprotocol/logLevel': 'error' });
          for (const message of severe.filter((m) => m.method === 'notifications/message'))
            expect(message.params?.level).to.be.oneOf(['error', 'critical', 'alert', 'emergency']);
          expect(textOf((await call(toggle, {})).at(-1)?.result)).to.match(/^Stopped simulated/);
        }
        const progress = await call(
          'everything__trigger-long-running-operation',
          { duration: 0.2, steps: 2 },
          { progressToken: 'mine' },
        );
        expect(progress.slice(0, -1).map((m) => m.params)).to.deep.equal(
          [1, 2].map((step) => ({ progress: step, total: 2, progressToken: 'mine' })),
        );
        expect(progress.at(-1)?.result?._meta).to.have.property(PROOF_META_KEY);
        // 2026-07-28 announces changes only on a subscriptions/listen stream, which the gateway has not.
        for (const tool of ['gateway_disable_server', 'gateway_enable_server']) {
          const changed = await call(tool, { serverId: 'everything' });
          expect(methods(changed), tool).to.deep.equal([]);
          expect(changed.at(-1)?.result?.isError, tool).to.not.equal(true);
        }
      });

      it('a client that accepts only JSON gets the plain JSON answer, without the notifications', async () => {
        const res = await postMcp(
          `${serving.url}/mcp`,
          JSON.stringify({
            jsonrpc: '2.0',
            id: 7,
            method: 'tools/call',
            params: {
              name: 'everything__trigger-long-running-operation',
              arguments: { duration: 0.2, steps: 2 },
              _meta: { progressToken: 'mine' },
            },
          }),
          { authorization: `Bearer ${token}`, 'x-mcp-session': 'stream', accept: 'application/json' },
        );
        expect(res.headers.get('content-type')).to.match(/^application\/json/);
        const body = (await res.json()) as { id: number; result: { content: { text: string }[] } };
        expect(body.id).to.equal(7);
        expect(body.result.content[0]?.text).to.match(/^Long running operation completed/);
      });

      it('does not list the task-only simulate-research-query, and refuses a call of it with reason task_required', async () => {
        const { tools } = await client.listTools();
        const names = tools.map((tool) => tool.name);
        expect(names).to.include('everything__echo');
        expect(names).not.to.include('everything__simulate-research-query');
        const refused = await client
          .callTool({ name: 'everything__simulate-research-query', arguments: { topic: 'x' } })
          .then(
            () => undefined,
            (err: unknown) => err,
          );
        expect(refused).to.be.instanceOf(McpError);
        expect((refused as McpError).code).to.equal(-32602);
        expect((refused as McpError).data).to.deep.include({
          code: 'invalid_request',
          reason: 'task_required',
        });
        const details = (await (await fetch(`${serving.url}/api/servers/everything`)).json()) as {
          taskOnlyTools: string[];
        };
        expect(details.taskOnlyTools).to.deep.equal(['simulate-research-query']);
      });

      it('disabling the server announces the change too', async () => {
        const relisted = new Promise<void>((resolve) => (listChanged = resolve));
        await client.callTool({ name: 'gateway_disable_server', arguments: { serverId: 'everything' } });
        await relisted;
        expect(changedLists.at(-1)?.map((tool) => tool.name)).not.to.include('everything__echo');
      });
    });
  }
});
