import type { Client as ClientV2 } from '@modelcontextprotocol/client';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { PROOF_META_KEY, type ExecutionProof } from '../../../services/gateway/proofs.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import {
  mcpClient,
  mcpClientV2,
  MODERN_REVISION,
  postMcp,
  postModern,
  ProbeWorld,
  textOf,
  walletToken,
} from './support.ts';
import { ENVELOPE } from '../../../core/mcp/era.ts';

const SERVER_INFO = ENVELOPE.serverInfo;

type Answer = { result?: Record<string, unknown>; error?: { code: number; message: string; data?: unknown } };

/** The UTC time of day (HH:MM) `minutes` from now. */
function inMinutes(minutes: number): string {
  const at = new Date(Date.now() + minutes * 60_000);
  return `${String(at.getUTCHours()).padStart(2, '0')}:${String(at.getUTCMinutes()).padStart(2, '0')}`;
}

/**
 * MCP 2026-07-28 beside 2025-11-25 on one running gateway: an SDK v2 client and an SDK 1.x client
 * list, enable and call the probe server's tools (installed from verdaccio, run in the sandbox) on
 * POST /mcp and POST /mcp/server/probe, and the proofs of either verify.
 */
describe('gateway MCP at 2026-07-28 and 2025-11-25 side by side (SDK v2 and SDK 1.x clients)', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  before(async () => {
    world = await ProbeWorld.start();
  });
  after(() => world.stop());

  for (const database of TEST_DATABASES) {
    describe(`on ${database.name}`, () => {
      let serving: Serving & { url: string };
      let url: string;
      let token: string;
      let modern: ClientV2;
      let legacy: Client;
      const names = async (client: ClientV2 | Client) => (await client.listTools()).tools.map((t) => t.name);

      before(async () => {
        serving = await world.gateway(database, {
          // A daily refresh soon: a per-server list's cache hint must end before it.
          refresh: { enabled: true, at: inMinutes(10), pollSeconds: 60 },
          mcp: { listTtlSeconds: 86_400 },
        });
        url = serving.url;
        token = (await walletToken(url)).token;
        modern = await mcpClientV2(`${url}/mcp`, token, 'both');
        legacy = await mcpClient(`${url}/mcp`, token, 'both');
      });
      after(async () => {
        await modern?.close();
        await legacy?.close();
        await serving?.stop();
      });

      it('each client speaks its revision; both see the meta-tools', async () => {
        expect(modern.getProtocolEra()).to.equal('modern');
        expect(legacy.getServerVersion()?.name).to.equal('sigil-gateway');
        expect(modern.getServerVersion()).to.deep.equal(legacy.getServerVersion());
        expect(await names(modern)).to.deep.equal(await names(legacy));
      });

      it('the v2 client enables the probe; both list and call its tools; a change by either shows at once', async () => {
        const enabled = await modern.callTool({
          name: 'gateway_enable_server',
          arguments: { serverId: 'probe' },
        });
        expect(enabled.isError, textOf(enabled)).to.not.equal(true);
        // The v2 client caches tools/list by default: the hint (private, 0) makes it list again.
        expect(await names(modern)).to.include.members(['probe__echo', 'probe__instance']);
        expect(await names(legacy)).to.include.members(['probe__echo', 'probe__instance']);
        const fromModern = await modern.callTool({ name: 'probe__echo', arguments: { message: 'from v2' } });
        expect(textOf(fromModern)).to.equal('from v2');
        expect(
          textOf(await legacy.callTool({ name: 'probe__echo', arguments: { message: 'from 1.x' } })),
        ).to.equal('from 1.x');
        // One warm process serves both revisions.
        const instances = [
          textOf(await modern.callTool({ name: 'probe__instance', arguments: {} })),
          textOf(await legacy.callTool({ name: 'probe__instance', arguments: {} })),
        ];
        expect(instances[0]).to.equal(instances[1]);
        await legacy.callTool({ name: 'gateway_disable_server', arguments: { serverId: 'probe' } });
        expect(await names(modern)).not.to.include('probe__echo');
        await legacy.callTool({ name: 'gateway_enable_server', arguments: { serverId: 'probe' } });
        expect(await names(modern)).to.include('probe__echo');
      });

      it('proves a call on either revision, and POST /api/verify accepts each proof against the result as delivered', async () => {
        const auth = { authorization: `Bearer ${token}`, 'x-mcp-session': 'both' };
        const params = { name: 'probe__echo', arguments: { message: 'proven' } };
        const modernAnswer = (await (
          await postModern(`${url}/mcp`, { method: 'tools/call', params }, { headers: auth })
        ).json()) as Answer;
        const legacyAnswer = (await (
          await postMcp(
            `${url}/mcp`,
            JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
            auth,
          )
        ).json()) as Answer;
        const modernResult = modernAnswer.result as CallToolResult;
        const legacyResult = legacyAnswer.result as CallToolResult;
        expect(modernResult).to.include({ resultType: 'complete' });
        expect(modernResult._meta?.[SERVER_INFO]).to.deep.include({ name: 'sigil-gateway' });
        expect(legacyResult).to.not.have.property('resultType');
        expect(legacyResult._meta).to.not.have.property(SERVER_INFO);
        const proofs = [modernResult, legacyResult].map(
          (result) => result._meta?.[PROOF_META_KEY] as ExecutionProof,
        );
        // The same call and result: the same hashes, whichever revision carried them.
        expect(proofs[0]?.responseHash).to.equal(proofs[1]?.responseHash);
        expect(proofs[0]?.requestHash).to.equal(proofs[1]?.requestHash);
        for (const [proof, response] of [
          [proofs[0], modernResult],
          [proofs[1], legacyResult],
        ] as const) {
          const verified = await fetch(`${url}/api/verify`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              proof,
              request: { serverId: 'probe', tool: 'echo', arguments: params.arguments },
              response,
            }),
          });
          expect(verified.status, JSON.stringify(await verified.clone().json())).to.equal(200);
        }
        // A changed result does not verify, whatever its framing.
        const changed = await fetch(`${url}/api/verify`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            proof: proofs[0],
            response: { ...modernResult, content: [{ type: 'text', text: 'forged' }] },
          }),
        });
        expect(changed.status).to.equal(422);
      });

      it('POST /mcp/server/probe: a server of its own to a v2 client, its list public until the next refresh', async () => {
        const perServer = await mcpClientV2(`${url}/mcp/server/probe`);
        try {
          expect(perServer.getServerVersion()?.name).to.equal('sigil-gateway/probe');
          expect(await names(perServer)).to.include('echo');
          expect(
            textOf(await perServer.callTool({ name: 'echo', arguments: { message: 'direct' } })),
          ).to.equal('direct');
        } finally {
          await perServer.close();
        }
        const sent = Date.now();
        const list = (await (
          await postModern(`${url}/mcp/server/probe`, { method: 'tools/list' })
        ).json()) as Answer;
        const status = (await (await fetch(`${url}/api/warmup/status`)).json()) as {
          summary: { nextRefresh: string };
        };
        const untilRefresh = Date.parse(status.summary.nextRefresh) - sent;
        expect(list.result).to.include({ cacheScope: 'public', resultType: 'complete' });
        const ttlMs = list.result?.ttlMs as number;
        expect(ttlMs).to.be.within(untilRefresh - 60_000, untilRefresh);
        expect(ttlMs).to.be.greaterThan(0);
        const discover = (await (
          await postModern(`${url}/mcp/server/probe`, { method: 'server/discover' })
        ).json()) as Answer;
        expect(discover.result).to.include({ ttlMs: 86_400_000, cacheScope: 'public' });
        expect(discover.result?._meta).to.deep.equal({
          [SERVER_INFO]: { name: 'sigil-gateway/probe', version: modern.getServerVersion()?.version },
        });
        // 2025-11-25: no hints, the same tools.
        const legacyList = (await (
          await postMcp(
            `${url}/mcp/server/probe`,
            JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
          )
        ).json()) as Answer;
        expect(legacyList.result).to.have.keys('tools');
        // 2026-07-28 removed `execution` (task support) from tools.
        const withoutExecution = (tools: unknown) =>
          (tools as Record<string, unknown>[]).map(({ execution: _removed, ...tool }) => tool);
        expect(withoutExecution(legacyList.result?.tools)).to.deep.equal(list.result?.tools);
      });

      it('POST /mcp/server/probe: refuses 2026-07-28 bad input with 4xx, never 500; GET and DELETE stay 405', async () => {
        const probe = `${url}/mcp/server/probe`;
        const answers = [
          await postModern(probe, { method: 'initialize' }),
          await postModern(
            probe,
            { method: 'tools/call', params: { name: 'echo', arguments: {} } },
            {
              headers: { 'mcp-name': 'sleep' },
            },
          ),
          await postModern(
            probe,
            { method: 'tools/list' },
            {
              meta: { 'io.modelcontextprotocol/protocolVersion': '2025-11-25' },
              headers: { 'mcp-protocol-version': '2025-11-25' },
            },
          ),
          await postModern(
            probe,
            { method: 'tools/list' },
            { headers: { 'mcp-protocol-version': 'v999.0.0' } },
          ),
        ];
        expect(answers.map((res) => res.status)).to.deep.equal([404, 400, 400, 400]);
        const codes = await Promise.all(
          answers.map(async (res) => ((await res.json()) as Answer).error?.code),
        );
        expect(codes).to.deep.equal([-32601, -32020, -32022, -32020]);
        const noEnvelope = await postMcp(
          probe,
          JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
          {
            'mcp-protocol-version': MODERN_REVISION,
          },
        );
        expect(noEnvelope.status).to.equal(400);
        for (const method of ['GET', 'DELETE']) {
          expect((await fetch(probe, { method })).status, method).to.equal(405);
        }
      });
    });
  }
});
