import { Writable } from 'node:stream';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { describeEachDatabase, type TestDatabase } from '../../support/kernel.ts';
import { hostileEntry, hostilePackage, mcpClient, ProbeWorld, textOf, walletToken } from './support.ts';

/**
 * The secret's forms that must never leave the gateway, computed here from their definitions (the
 * fixture writes each one its own way): raw, JSON-escaped (plain, ASCII-only, twice), URL-encoded
 * (component and form), hex, and the part of its base64 and base64url that is the secret's alone at
 * each byte alignment of a longer stream.
 */
function leakForms(secret: string): string[] {
  const bytes = Buffer.from(secret);
  const json = JSON.stringify(secret).slice(1, -1);
  const forms = [
    secret,
    json,
    json.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`),
    JSON.stringify(json).slice(1, -1),
    encodeURIComponent(secret),
    new URLSearchParams({ s: secret }).toString().slice(2),
    bytes.toString('hex'),
    bytes.toString('hex').toUpperCase(),
  ];
  for (const alphabet of ['base64', 'base64url'] as const) {
    for (const offset of [0, 1, 2]) {
      const encoded = Buffer.concat([Buffer.alloc(offset, 0x61), bytes]).toString(alphabet);
      // Character i holds bits 6i…6i+5: the secret's alone from the first whole one to the last.
      forms.push(encoded.slice(Math.ceil((8 * offset) / 6), Math.floor((8 * (offset + bytes.length)) / 6)));
    }
  }
  return forms;
}

/** Fails naming the form (by its index) that `text` holds; also checks them JSON-escaped, as in a log line. */
function expectNoLeak(text: string, secret: string, core: string): void {
  expect(text, 'the random core of the secret').not.to.include(core);
  leakForms(secret).forEach((form, index) => {
    expect(text.includes(form), `form ${index} of the secret`).to.equal(false);
    expect(text.includes(JSON.stringify(form).slice(1, -1)), `form ${index}, JSON-escaped`).to.equal(false);
  });
}

describeEachDatabase(
  'gateway: a secret is redacted in every encoding, in results, errors and logs',
  (database: TestDatabase) => {
    // Quotes, a backslash, a newline, a control character, non-ASCII and URL-special characters: each
    // has an escaped form that differs from the raw one.
    const core = `k${Math.random().toString(36).slice(2, 14)}`;
    const canary = `canary"\\\n\u0001é +/&=%~${core}`;
    const lines: string[] = [];
    let world: ProbeWorld;
    let gateway: Serving & { url: string };
    let token: string;

    before(async function () {
      this.timeout(120_000);
      world = await ProbeWorld.start({
        packages: [hostilePackage],
        servers: [
          hostileEntry,
          {
            ...hostileEntry,
            id: 'hostile-leaky-start',
            entry: { bin: 'sigil-hostile', args: ['--leak-at-start'] },
            secrets: [{ name: 'CANARY_SECRET', required: true }],
          },
        ],
      });
      const logs = new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push(chunk.toString());
          done();
        },
      });
      gateway = await world.gateway(database, {}, { logDestination: logs });
      token = (await walletToken(gateway.url)).token;
      for (const server of ['hostile', 'hostile-leaky-start']) {
        const stored = await fetch(`${gateway.url}/api/secrets/${server}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
          body: JSON.stringify({ secrets: { CANARY_SECRET: canary } }),
        });
        expect(stored.status).to.equal(200);
      }
    });
    after(async () => {
      await gateway?.stop();
      await world?.stop();
    });

    it('redacts every encoding of the secret in a result over MCP and REST, object keys included', async () => {
      const client = await mcpClient(`${gateway.url}/mcp/server/hostile`, token);
      const result = (await client.callTool({ name: 'leak', arguments: {} })) as CallToolResult;
      await client.close();
      expect(result.isError).to.not.equal(true);
      const text = textOf(result);
      // Each line said the secret in one encoding: each one now says [REDACTED] instead.
      for (const line of text.split('\n')) expect(line, line).to.include('[REDACTED]');
      expectNoLeak(text, canary, core);
      expectNoLeak(JSON.stringify(result), canary, core);
      expect(Object.keys(result.structuredContent ?? {})).to.include.members([
        '[REDACTED]',
        'encodings',
        'nested',
      ]);
      expect(result.structuredContent?.nested).to.deep.equal({ '[REDACTED]-suffix': ['[REDACTED]'] });

      const rest = await fetch(`${gateway.url}/api/servers/hostile/tools/leak`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: '{"arguments":{}}',
      });
      expect(rest.status).to.equal(200);
      const body = await rest.text();
      expect(body).to.include('[REDACTED]');
      expectNoLeak(body, canary, core);
    });

    it('redacts every encoding of the secret in a tool error', async () => {
      const client = await mcpClient(`${gateway.url}/mcp/server/hostile`, token);
      const result = (await client.callTool({ name: 'leak-error', arguments: {} })) as CallToolResult;
      await client.close();
      expect(result.isError).to.equal(true);
      expect(textOf(result)).to.include('[REDACTED]');
      expectNoLeak(JSON.stringify(result), canary, core);
    });

    it('redacts every encoding of the secret in the log and the error of a server that said it on stderr and to initialize', async () => {
      const client = await mcpClient(`${gateway.url}/mcp/server/hostile-leaky-start`, token);
      const result = (await client.callTool({ name: 'leak', arguments: {} })) as CallToolResult;
      await client.close();
      expect(result.isError).to.equal(true);
      // Why it did not start: its answer to initialize, which quoted the secret.
      expect(textOf(result))
        .to.match(/did not start/)
        .and.to.include('[REDACTED]');
      expectNoLeak(JSON.stringify(result), canary, core);
      const logged = lines.join('');
      const failure = logged.split('\n').find((line) => line.includes('MCP server failed to start'));
      expect(failure, 'the failed start was logged').to.be.a('string');
      expect(failure).to.include('[REDACTED]');
      expectNoLeak(logged, canary, core);
    });
  },
);
