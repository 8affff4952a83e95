import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { parsePaymentRequired } from '@x402/core/schemas';
import { expect } from 'chai';
import { sigilUpSuite } from '../support/sigil-up-suite.ts';
import { runExample } from './support.ts';

/**
 * Issue 22's first hour: after `sigil up`, the banner says calls are paid on the dev chain, and the
 * commands it prints (the shipped examples) pay for a call and get its proof verified; an unpaid
 * call's 402 names them. The examples call the probe server of a local registry instead of the
 * shipped catalog's `everything` (SIGIL_SERVER): nothing here reaches the public npm registry.
 */
describe('examples/pay-over-rest.mjs and pay-over-mcp.mjs after sigil up', function () {
  this.timeout(240_000);
  // The ready line comes last, once the warmup has installed the probe server the examples call.
  const sigil = sigilUpSuite(/^ready {4}.*\n/m, { warmupAtStart: true, timeoutMs: 170_000 });

  /** The command the banner prints for `example`, run as printed (node from the repository's root). */
  async function runPrinted(example: string, message: string): Promise<string> {
    const line = new RegExp(`(node examples/${example}\\S*(?: \\S+)?)\\s+\\(over`).exec(sigil.up.output());
    expect(line, `the banner prints how to run ${example}`).to.not.equal(null);
    const [command, ...args] = line![1]!.split(' ');
    expect(command).to.equal('node');
    return runExample(args, { SIGIL_SERVER: 'probe', SIGIL_MESSAGE: message });
  }

  it('the banner says tool calls are paid on the dev chain, how to pay, how to make them free, and the inspector command', () => {
    const output = sigil.up.output();
    expect(output).to.match(
      /^payments payments-x402-evm: a tool call costs 0\.0005 Sigil Dollar \(500 base units\), paid with x402 on the local dev chain below$/m,
    );
    expect(output).to.include(`  pay    node examples/pay-over-rest.mjs ${sigil.gatewayUrl}   (over REST`);
    expect(output).to.include(`         node examples/pay-over-mcp.mjs ${sigil.gatewayUrl}   (over MCP)`);
    expect(output).to.match(/^ {2}free {3}DEV_CHAIN=false npm start /m);
    expect(output).to.include(
      `inspect  npx @modelcontextprotocol/inspector --cli ${sigil.gatewayUrl}/mcp --transport http --method tools/list`,
    );
    expect(output).to.match(
      new RegExp(
        `^ready {4}gateway ${sigil.gatewayUrl}/mcp, runtime http://127\\.0\\.0\\.1:\\d+; \\d/2 catalog servers warm$`,
        'm',
      ),
    );
  });

  for (const example of ['pay-over-rest.mjs', 'pay-over-mcp.mjs']) {
    it(`${example}, as printed, pays for a call with the dev wallet and gets its proof verified`, async () => {
      const before = await sigil.balanceOf(sigil.banner.payer);
      const stdout = await runPrinted(example, `paid by ${example}`);
      expect(stdout).to.match(
        /^payments {2}500 base units \(0\.0005 USD\) of Sigil Dollar per call on eip155:8453/m,
      );
      expect(stdout).to.match(new RegExp(`^result {4}paid by ${example}$`, 'm'));
      expect(stdout).to.match(
        new RegExp(`^paid {6}by ${sigil.banner.payer} on eip155:8453, transaction 0x[0-9a-f]{64}$`, 'm'),
      );
      expect(stdout).to.match(/^proof {5}[0-9a-f-]{36} \(server probe, tool echo, /m);
      expect(stdout).to.match(/^verified {2}POST \/api\/verify: the proof is valid/m);
      // The call and the verification, 500 base units each, from the printed payer.
      expect(await sigil.balanceOf(sigil.banner.payer)).to.equal(before - 1000n);
    });
  }

  describe('an unpaid call', () => {
    const devHint =
      /`node examples\/pay-over-rest\.mjs` \(REST\) or `node examples\/pay-over-mcp\.mjs` \(MCP\) pays with the dev wallet.*`DEV_CHAIN=false npm start` makes tool calls free/;

    it('over REST: 402 with a valid PAYMENT-REQUIRED and a hint naming the examples and DEV_CHAIN=false', async () => {
      const res = await fetch(`${sigil.gatewayUrl}/api/servers/probe/tools/echo`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ arguments: { message: 'unpaid' } }),
      });
      expect(res.status).to.equal(402);
      const required = decodePaymentRequiredHeader(res.headers.get('payment-required') as string);
      expect(parsePaymentRequired(required).success).to.equal(true);
      const body = (await res.json()) as { code: string; hint: string };
      expect(body.code).to.equal('payment_required');
      expect(body.hint).to.match(/^Pay with x402: /);
      expect(body.hint).to.match(devHint);
    });

    it('over MCP: JSON-RPC 402 whose data is a valid PaymentRequired with the hint, also in the message', async () => {
      const client = new Client({ name: 'unpaid', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${sigil.gatewayUrl}/mcp/server/probe`)),
      );
      try {
        const err = await client.callTool({ name: 'echo', arguments: { message: 'unpaid' } }).then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(err).to.be.instanceOf(McpError);
        const { code, data, message } = err as McpError;
        expect(code).to.equal(402);
        expect(parsePaymentRequired(data).success).to.equal(true);
        const { hint } = data as { hint: string };
        expect(hint).to.match(devHint);
        expect(message).to.include(hint);
      } finally {
        await client.close();
      }
    });
  });
});
