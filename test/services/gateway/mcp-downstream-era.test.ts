import {
  Client as ClientV2,
  MissingRequiredClientCapabilityError,
  StreamableHTTPClientTransport as HttpTransportV2,
} from '@modelcontextprotocol/client';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import pino from 'pino';
import { openDatabase, type Database } from '../../../core/db/database.ts';
import type { Serving } from '../../../services/serve.ts';
import { eventually } from '../../support/eventually.ts';
import { stickyDatabase, TEST_DATABASES } from '../../support/kernel.ts';
import { PROOF_META_KEY } from '../../../services/gateway/proofs.ts';
import {
  mcpClient,
  modernEchoEntry,
  modernEchoPackage,
  type JsonRpcAnswer,
  postMcp,
  postModern,
  probeEntry,
  ProbeWorld,
  textOf,
  walletToken,
} from './support.ts';
import { ENVELOPE } from '../../../core/mcp/era.ts';

const SERVER_INFO = ENVELOPE.serverInfo;
const PROBED = 'MCP server protocol probed';
const REPROBED = 'MCP server refused its recorded protocol; probed again';
const SILENT = 'MCP server did not answer server/discover: legacy, on a fresh process';

interface Details {
  protocol: { era: string; version: string } | null;
  tier: string | null;
  lastError: string | null;
}

/** What the modern server's `envelope` tool says of a call: the envelope it got, the methods its process got. */
interface EnvelopeSeen {
  envelope: Record<string, unknown>;
  methods: string[];
}

/**
 * An SDK v2 client: at 2026-07-28 (pinned), declaring `capabilities`, or at 2025-11-25 (`legacy`);
 * with `name`, it answers a form elicitation with that name.
 */
async function clientV2(
  url: string,
  options: {
    legacy?: boolean;
    capabilities?: Record<string, unknown>;
    headers?: Record<string, string>;
    name?: string;
  } = {},
): Promise<ClientV2> {
  const client = new ClientV2(
    { name: 'sigil-test-v2', version: '1.0.0' },
    {
      ...(options.legacy ? {} : { versionNegotiation: { mode: { pin: '2026-07-28' } } }),
      capabilities: options.capabilities ?? {},
    },
  );
  const { name } = options;
  if (name !== undefined) {
    client.setRequestHandler('elicitation/create', () =>
      Promise.resolve({ action: 'accept' as const, content: { name } }),
    );
  }
  await client.connect(
    new HttpTransportV2(new URL(url), { requestInit: { headers: options.headers ?? {} } }),
  );
  return client;
}

/**
 * The gateway as a client of its MCP servers speaks what each server speaks: the SDK 1.x probe
 * (2025-11-25 only) and an SDK v2 server (2026-07-28 first) both verify, each with its protocol
 * recorded; every caller, at either revision, lists and calls both on /mcp and /mcp/server/:id; a
 * restart uses the recorded protocol without probing, and a process that refuses it is probed again.
 */
describe('gateway as an MCP client: each server at its own revision', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  before(async () => {
    world = await ProbeWorld.start({
      packages: [modernEchoPackage],
      servers: [
        modernEchoEntry,
        { ...probeEntry, id: 'silent', env: { PROBE_UNANSWERED: 'server/discover' } },
      ],
    });
  });
  after(() => world?.stop());

  for (const database of TEST_DATABASES) {
    describe(`on ${database.name}`, () => {
      const sticky = stickyDatabase(database);
      const logs: { msg: string; serverId?: string; protocol?: unknown }[] = [];
      let serving: Serving & { url: string };
      let db: Database;
      let url: string;
      let token: string;
      const details = async (id: string) =>
        (await (await fetch(`${url}/api/servers/${id}`)).json()) as Details;
      const logged = (msg: string, serverId: string) =>
        logs.filter((line) => line.msg === msg && line.serverId === serverId).length;

      before(async () => {
        const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line)) });
        serving = await world.gateway(sticky.database, {}, { logger });
        url = serving.url;
        token = (await walletToken(url)).token;
        const { url: dbUrl, schema } = sticky.database.fresh();
        db = await openDatabase({ url: dbUrl, ...(schema ? { schema } : {}) });
      });
      after(async () => {
        await db?.destroy();
        await serving?.stop();
        await sticky.drop();
      });

      it('verifies both, probing each once, and records the era with the pin', async () => {
        for (const id of ['probe', 'modern']) {
          const tools = await fetch(`${url}/api/servers/${id}/tools`);
          expect(tools.status, id).to.equal(200);
        }
        const [probe, modern] = [await details('probe'), await details('modern')];
        expect(probe.protocol).to.deep.equal({ era: 'legacy', version: '2025-11-25' });
        expect(modern.protocol).to.deep.equal({ era: 'modern', version: '2026-07-28' });
        // The smoke tool answered on either protocol.
        expect([probe.tier, modern.tier]).to.deep.equal(['tool_smoke_passed', 'tool_smoke_passed']);
        expect([logged(PROBED, 'probe'), logged(PROBED, 'modern')]).to.deep.equal([1, 1]);
        const rows = (await db('gateway_servers')
          .whereIn('server_id', ['probe', 'modern'])
          .orderBy('server_id')
          .select('server_id', 'protocol_era', 'protocol_version')) as Record<string, string>[];
        expect(rows).to.deep.equal([
          { server_id: 'modern', protocol_era: 'modern', protocol_version: '2026-07-28' },
          { server_id: 'probe', protocol_era: 'legacy', protocol_version: '2025-11-25' },
        ]);
      });

      it('lists and calls both servers on /mcp/server/:id, for an SDK 1.x and an SDK v2 client at each revision', async () => {
        for (const id of ['probe', 'modern']) {
          const endpoint = `${url}/mcp/server/${id}`;
          const clients: [string, Client | ClientV2][] = [
            ['SDK 1.x', await mcpClient(endpoint)],
            ['SDK v2 at 2025-11-25', await clientV2(endpoint, { legacy: true })],
            ['SDK v2 at 2026-07-28', await clientV2(endpoint)],
          ];
          try {
            for (const [name, client] of clients) {
              const listed = (await client.listTools()).tools.map((tool) => tool.name);
              expect(listed, `${id}, ${name}`).to.include('echo');
              const result = await client.callTool({ name: 'echo', arguments: { message: `${id} ${name}` } });
              expect(textOf(result), `${id}, ${name}`).to.equal(`${id} ${name}`);
              // A modern server's framing and identity are never passed on: a modern caller is
              // answered by the gateway's per-server endpoint, a legacy one without either.
              const identity = result._meta?.[SERVER_INFO] as { name: string } | undefined;
              expect(identity?.name ?? `sigil-gateway/${id}`, `${id}, ${name}`).to.equal(
                `sigil-gateway/${id}`,
              );
            }
          } finally {
            await Promise.all(clients.map(([, client]) => client.close()));
          }
        }
      });

      it('lists and calls both servers on /mcp, enabled in one session, for either revision', async () => {
        const headers = { authorization: `Bearer ${token}`, 'x-mcp-session': 'eras' };
        const modern = await clientV2(`${url}/mcp`, { headers });
        const legacy = await mcpClient(`${url}/mcp`, token, 'eras');
        try {
          for (const serverId of ['probe', 'modern']) {
            const enabled = await modern.callTool({ name: 'gateway_enable_server', arguments: { serverId } });
            expect(enabled.isError, textOf(enabled)).to.not.equal(true);
          }
          for (const [name, client] of [
            ['2026-07-28', modern],
            ['2025-11-25', legacy],
          ] as const) {
            const listed = (await client.listTools()).tools.map((tool) => tool.name);
            expect(listed, name).to.include.members(['probe__echo', 'modern__echo']);
            for (const tool of ['probe__echo', 'modern__echo']) {
              const result = await client.callTool({ name: tool, arguments: { message: `${tool} ${name}` } });
              expect(textOf(result)).to.equal(`${tool} ${name}`);
            }
          }
        } finally {
          await modern.close();
          await legacy.close();
        }
      });

      it('tells a modern server who calls: the gateway as client, the caller’s capabilities (none for 2025-11-25)', async () => {
        const endpoint = `${url}/mcp/server/modern`;
        const modern = await clientV2(endpoint, { capabilities: { elicitation: {} } });
        const legacy = await mcpClient(endpoint);
        try {
          const seen = async (client: Client | ClientV2) =>
            ((await client.callTool({ name: 'envelope', arguments: {} })) as CallToolResult)
              .structuredContent as unknown as EnvelopeSeen;
          const fromModern = await seen(modern);
          const fromLegacy = await seen(legacy);
          expect(fromModern.envelope).to.deep.include({
            'io.modelcontextprotocol/protocolVersion': '2026-07-28',
            'io.modelcontextprotocol/clientCapabilities': { elicitation: {} },
          });
          expect(fromModern.envelope['io.modelcontextprotocol/clientInfo']).to.include({
            name: 'sigil-gateway',
          });
          expect(fromLegacy.envelope['io.modelcontextprotocol/clientCapabilities']).to.deep.equal({});
          // The pooled process was started at its recorded revision: no initialize, ever.
          expect(fromLegacy.methods[0]).to.equal('server/discover');
          expect(fromLegacy.methods).to.not.include('initialize');
        } finally {
          await modern.close();
          await legacy.close();
        }
      });

      it('restarts a crashed server at its recorded revision, without probing it again', async () => {
        for (const id of ['probe', 'modern']) {
          const client = await mcpClient(`${url}/mcp/server/${id}`);
          try {
            const instance = async () => textOf(await client.callTool({ name: 'instance', arguments: {} }));
            const before = await instance();
            const probes = logged(PROBED, id);
            const crashed = await client.callTool({ name: 'crash', arguments: {} });
            expect(crashed.isError, id).to.equal(true);
            const after = await instance();
            expect(after, id).to.not.equal(before);
            expect(logged(PROBED, id), id).to.equal(probes);
            expect(textOf(await client.callTool({ name: 'echo', arguments: { message: 'again' } }))).to.equal(
              'again',
            );
          } finally {
            await client.close();
          }
        }
      });

      it('probes again, once, a process that refuses its recorded revision, and records what it speaks', async () => {
        // As if the SDK 1.x probe had been recorded as a 2026-07-28 server.
        await db('gateway_servers')
          .where({ server_id: 'probe' })
          .update({ protocol_era: 'modern', protocol_version: '2026-07-28' });
        await eventually(
          'the changed record to be read',
          async () => (await details('probe')).protocol?.era === 'modern',
        );
        const client = await mcpClient(`${url}/mcp/server/probe`);
        try {
          // Its warm process goes, so the next call starts one at the recorded revision.
          await client.callTool({ name: 'crash', arguments: {} });
          expect(
            textOf(await client.callTool({ name: 'echo', arguments: { message: 'reprobed' } })),
          ).to.equal('reprobed');
        } finally {
          await client.close();
        }
        expect(logged(REPROBED, 'probe')).to.equal(1);
        // Recorded beside the call, not before its answer.
        await eventually(
          'the probed protocol to be recorded',
          async () => (await details('probe')).protocol?.era === 'legacy',
        );
        expect((await details('probe')).protocol).to.deep.equal({ era: 'legacy', version: '2025-11-25' });
      });

      it('relays a modern server’s input_required to an SDK v2 client, which answers it and gets the proven result', async () => {
        const asked = await clientV2(`${url}/mcp/server/modern`, {
          capabilities: { elicitation: {} },
          name: 'Ada',
        });
        const headers = { authorization: `Bearer ${token}`, 'x-mcp-session': 'eras' };
        const namespaced = await clientV2(`${url}/mcp`, {
          capabilities: { elicitation: {} },
          name: 'Bob',
          headers,
        });
        try {
          const direct = await asked.callTool({ name: 'greet', arguments: { greeting: 'Hi' } });
          expect(textOf(direct)).to.equal('Hi, Ada!');
          expect(direct._meta).to.have.property(PROOF_META_KEY);
          const viaMcp = await namespaced.callTool({ name: 'modern__greet', arguments: {} });
          expect(textOf(viaMcp)).to.equal('Hello, Bob!');
          expect(viaMcp._meta).to.have.property(PROOF_META_KEY);
        } finally {
          await asked.close();
          await namespaced.close();
        }
      });

      it('seals the server’s requestState: a changed, misdirected or absent one is -32602, the echoed one completes the call', async () => {
        const endpoint = `${url}/mcp/server/modern`;
        const caps = { 'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } };
        const call = async (params: Record<string, unknown>) =>
          (await (
            await postModern(
              endpoint,
              { method: 'tools/call', params: { name: 'greet', arguments: {}, ...params } },
              { meta: caps },
            )
          ).json()) as JsonRpcAnswer;
        const first = (await call({})).result ?? {};
        expect(first.resultType).to.equal('input_required');
        expect(first.inputRequests).to.have.nested.property('user_name.method', 'elicitation/create');
        // Nothing ran to completion: no proof, nothing to settle.
        expect(first._meta).to.not.have.property(PROOF_META_KEY);
        const state = first.requestState as string;
        // Not the server's own state (`asked:Hello`), which the client may neither read nor change.
        expect(state).to.be.a('string').and.not.include('asked:');
        const answer = { user_name: { action: 'accept', content: { name: 'Eve' } } };
        // One byte of the sealed server state changed (the first of its ciphertext: all six bits are data).
        const [iv, sealed = '', tag] = state.split('.');
        const flipped = [iv, `${sealed.startsWith('A') ? 'B' : 'A'}${sealed.slice(1)}`, tag].join('.');
        const tampered = await call({ inputResponses: answer, requestState: flipped });
        expect(tampered.error?.code).to.equal(-32602);
        expect(tampered.error?.message).to.include('requestState');
        const elsewhere = (await (
          await postModern(
            endpoint,
            {
              method: 'tools/call',
              params: {
                name: 'echo',
                arguments: { message: 'x' },
                inputResponses: answer,
                requestState: state,
              },
            },
            { meta: caps },
          )
        ).json()) as JsonRpcAnswer;
        expect(elsewhere.error?.code, 'another tool').to.equal(-32602);
        // Answers without the state: the server asks again.
        expect((await call({ inputResponses: answer })).result?.resultType).to.equal('input_required');
        const done = (await call({ inputResponses: answer, requestState: state })).result ?? {};
        expect(done.resultType).to.equal('complete');
        expect(textOf(done)).to.equal('Hello, Eve!');
        expect(done._meta).to.have.property(PROOF_META_KEY);
      });

      it('proves a retried call with its inputResponses: POST /api/verify takes them, and refuses other answers or none', async () => {
        const endpoint = `${url}/mcp/server/modern`;
        const caps = { 'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } };
        const args = { greeting: 'Hey' };
        const call = async (params: Record<string, unknown>) =>
          (await (
            await postModern(
              endpoint,
              { method: 'tools/call', params: { name: 'greet', arguments: args, ...params } },
              { meta: caps },
            )
          ).json()) as JsonRpcAnswer;
        const { requestState } = (await call({})).result ?? {};
        // Answers no proof could commit to are refused before the server hears them.
        const unprovable = await call({
          inputResponses: { user_name: { action: 'accept', content: { name: 'half \ud800' } } },
          requestState,
        });
        expect(unprovable.error?.code).to.equal(-32602);
        expect(unprovable.error?.data).to.deep.include({
          reason: 'lone_surrogate',
          path: 'inputResponses.user_name.content.name',
        });
        const inputResponses = { user_name: { action: 'accept', content: { name: 'Cy' } } };
        const done = (await call({ inputResponses, requestState })).result ?? {};
        expect(textOf(done)).to.equal('Hey, Cy!');
        const verify = (request: Record<string, unknown>) =>
          fetch(`${url}/api/verify`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              proof: (done._meta as Record<string, unknown>)[PROOF_META_KEY],
              request,
              response: done,
            }),
          });
        const request = { serverId: 'modern', tool: 'greet', arguments: args };
        expect((await verify({ ...request, inputResponses })).status).to.equal(200);
        for (const other of [
          { ...request, inputResponses: { user_name: { action: 'accept', content: { name: 'Eve' } } } },
          request,
        ]) {
          const refused = await verify(other);
          expect(refused.status).to.equal(422);
          expect(((await refused.json()) as { details: { fields: string[] } }).details.fields).to.deep.equal([
            'requestHash',
          ]);
        }
      });

      it('gives a 2025-11-25 caller, which cannot answer input, a tool error naming what the server asked', async () => {
        const legacy = (await (
          await postMcp(
            `${url}/mcp/server/modern`,
            JSON.stringify({
              jsonrpc: '2.0',
              id: 1,
              method: 'tools/call',
              params: { name: 'greet', arguments: {} },
            }),
          )
        ).json()) as JsonRpcAnswer;
        // Told of no capability, the server answers -32021, which reaches this caller as a tool error.
        expect(legacy.result?.isError).to.equal(true);
        expect(textOf(legacy.result)).to.include('elicitation/create').and.include('user_name');
        expect(legacy.result?._meta).to.have.property(PROOF_META_KEY);
      });

      it('relays the server’s -32021 to a 2026-07-28 caller that did not declare the capability: HTTP 400, the capability named, no proof', async () => {
        const headers = { authorization: `Bearer ${token}`, 'x-mcp-session': 'eras' };
        for (const [endpoint, name, extra] of [
          [`${url}/mcp/server/modern`, 'greet', {}],
          [`${url}/mcp`, 'modern__greet', headers],
        ] as const) {
          const response = await postModern(
            endpoint,
            { id: 7, method: 'tools/call', params: { name, arguments: {} } },
            { headers: extra },
          );
          const answer = (await response.json()) as JsonRpcAnswer & { id: unknown };
          expect(response.status, endpoint).to.equal(400);
          expect(answer.id).to.equal(7);
          expect(answer.result, endpoint).to.equal(undefined);
          expect(answer.error?.code, endpoint).to.equal(-32021);
          expect(answer.error?.message).to.include('greet').and.include('elicitation');
          expect(answer.error?.data).to.deep.equal({
            code: 'capability_required',
            serverId: 'modern',
            tool: 'greet',
            // As the server named it: form elicitation, what its request would use.
            requiredCapabilities: { elicitation: { form: {} } },
          });
        }
        // The SDK v2 client reads it as the spec's error, with the capability it must declare.
        const client = await clientV2(`${url}/mcp/server/modern`);
        try {
          const refused = await client.callTool({ name: 'greet', arguments: {} }).then(
            () => undefined,
            (err: unknown) => err,
          );
          expect(refused).to.be.instanceOf(MissingRequiredClientCapabilityError);
          expect((refused as MissingRequiredClientCapabilityError).requiredCapabilities).to.deep.equal({
            elicitation: { form: {} },
          });
          // The process was not taken for a broken one: the next call runs on it.
          expect(textOf(await client.callTool({ name: 'echo', arguments: { message: 'on' } }))).to.equal(
            'on',
          );
        } finally {
          await client.close();
        }
      });

      it('waits gateway.mcp.probeTimeoutSeconds for a server silent on server/discover, then serves it at 2025-11-25 on a fresh process', async () => {
        const quickLogs: typeof logs = [];
        const logger = pino(
          { level: 'info' },
          { write: (line: string) => void quickLogs.push(JSON.parse(line)) },
        );
        const quick = await world.gateway(database, { mcp: { probeTimeoutSeconds: 1 } }, { logger });
        try {
          const tools = await fetch(`${quick.url}/api/servers/silent/tools`);
          expect(tools.status).to.equal(200);
          const detailsOf = (await (await fetch(`${quick.url}/api/servers/silent`)).json()) as Details;
          expect(detailsOf.protocol).to.deep.equal({ era: 'legacy', version: '2025-11-25' });
          const gaveUp = quickLogs.filter(
            (line) => line.msg === SILENT && line.serverId === 'silent',
          ) as unknown as { err: string }[];
          expect(gaveUp.map((line) => line.err)).to.deep.equal([
            'Version negotiation probe timed out after 1000ms',
          ]);
          const client = await mcpClient(`${quick.url}/mcp/server/silent`);
          try {
            expect(textOf(await client.callTool({ name: 'echo', arguments: { message: 'heard' } }))).to.equal(
              'heard',
            );
          } finally {
            await client.close();
          }
        } finally {
          await quick.stop();
        }
      });
    });
  }
});
