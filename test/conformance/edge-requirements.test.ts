import type { IncomingMessage, ServerResponse } from 'node:http';
import { expect } from 'chai';
import {
  runRequirements,
  sendJson,
  startSigil,
  startTinyServer,
  statuses,
  type RunningSigil,
  type TinyServer,
} from './support.ts';

const EDGE_IDS = [
  'GW-4.mcp-host-refused',
  'GW-4.mcp-origin-refused',
  'GW-4.mcp-cors-preflight',
  'GW-5.invalid-token-401',
  'GW-5.protected-resource-metadata',
];
const REBINDING_IDS = EDGE_IDS.slice(0, 3);

/** An MCP endpoint that answers initialize whatever the Host and Origin, with no CORS: what rebinding needs. */
function openMcpServer(request: IncomingMessage, response: ServerResponse): void {
  let body = '';
  request.on('data', (chunk: Buffer) => (body += chunk.toString()));
  request.on('end', () => {
    if (request.method !== 'POST' || request.url !== '/mcp') return sendJson(response, 404, {});
    const { id } = JSON.parse(body) as { id: number };
    sendJson(response, 200, {
      jsonrpc: '2.0',
      id,
      result: {
        protocolVersion: '2025-06-18',
        capabilities: { tools: {} },
        serverInfo: { name: 'open', version: '1.0.0' },
      },
    });
  });
}

/** The gateway's HTTP edge requirements: DNS rebinding, CORS, and the 401 of a refused token. */
describe('conformance: the gateway edge (Host, Origin, CORS, the 401 and its metadata)', function () {
  this.timeout(120_000);

  describe('against a real Sigil', () => {
    let sigil: RunningSigil;
    before(async () => {
      sigil = await startSigil({ plugins: [{ resolve: 'tee-none', enabled: true, options: {} }] });
    });
    after(() => sigil.stop());

    it('passes each of them', async () => {
      const results = await runRequirements(
        { runtimeUrl: sigil.runtimeUrl, gatewayUrl: sigil.gatewayUrl },
        EDGE_IDS,
      );
      const failures = Object.values(results).filter((result) => result.status !== 'pass');
      expect(failures.map((result) => `${result.id}: ${result.reason}`)).to.deep.equal([]);
      expect(Object.keys(results).sort()).to.deep.equal([...EDGE_IDS].sort());
      // The forged Host really went out as the Host, in the evidence.
      const evidence = JSON.stringify(results['GW-4.mcp-host-refused']?.evidence);
      expect(evidence).to.include('"host":"conformance-rebinding.invalid');
      expect(evidence).to.include('"status":421');
    });
  });

  describe('against an MCP endpoint that serves any Host and Origin', () => {
    let server: TinyServer;
    before(async () => {
      server = await startTinyServer(openMcpServer);
    });
    after(() => server.close());

    it('fails the rebinding requirements, saying what it served', async () => {
      const results = await runRequirements(
        { runtimeUrl: server.url, gatewayUrl: server.url },
        REBINDING_IDS,
      );
      expect(statuses(results)).to.deep.equal({
        'GW-4.mcp-host-refused': 'fail',
        'GW-4.mcp-origin-refused': 'fail',
        'GW-4.mcp-cors-preflight': 'fail',
      });
      expect(results['GW-4.mcp-host-refused']?.reason).to.match(
        /Host: conformance-rebinding\.invalid answered 200/,
      );
      expect(results['GW-4.mcp-origin-refused']?.reason).to.match(/expected HTTP 403, got 200/);
    });
  });
});
