import { fileURLToPath } from 'node:url';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { MAX_ARGUMENT_DEPTH } from '../../../services/gateway/tool-arguments.ts';
import { MAX_RESULT_DEPTH } from '../../../services/gateway/tool-results.ts';
import { PROOF_META_KEY } from '../../../services/gateway/proofs.ts';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { hostileEntry, hostilePackage, mcpClient, ProbeWorld, textOf, walletToken } from './support.ts';

/** `[[[…]]]` `depth` arrays deep around `inner`. */
const nested = (depth: number, inner: unknown = 'bottom'): unknown => {
  let value = inner;
  for (let level = 0; level < depth; level += 1) value = [value];
  return value;
};

describe('gateway: tool arguments are checked before anything runs', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let gateway: Serving & { url: string };
  let token: string;
  let client: Client;

  before(async () => {
    world = await ProbeWorld.start({ packages: [hostilePackage], servers: [hostileEntry] });
    gateway = await world.gateway(TEST_DATABASES[0]);
    token = (await walletToken(gateway.url)).token;
    client = await mcpClient(`${gateway.url}/mcp/server/hostile`, token);
  });
  after(async () => {
    await client?.close();
    await gateway?.stop();
    await world?.stop();
  });

  /** The JSON-RPC error a call is refused with (the SDK throws it as McpError). */
  const refusal = async (args: Record<string, unknown>): Promise<McpError> => {
    const err = await client.callTool({ name: 'record', arguments: args }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(err, 'the call was refused').to.be.instanceOf(McpError);
    return err as McpError;
  };
  const rest = (args: unknown) =>
    fetch(`${gateway.url}/api/servers/hostile/tools/record`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ arguments: args }),
    });
  /** tools/call of `record` with `value` as raw JSON text: the SDK client cannot write it deep, or 1e400. */
  const rawCall = async (value: string, meta = '') => {
    const res = await fetch(`${gateway.url}/mcp/server/hostile`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${token}`,
      },
      body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{${meta}"name":"record","arguments":{"value":${value}}}}`,
    });
    expect(res.status).to.equal(200);
    return (await res.json()) as { error?: { code: number; message: string; data: unknown } };
  };
  const rawRest = (value: string) =>
    fetch(`${gateway.url}/api/servers/hostile/tools/record`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: `{"arguments":{"value":${value}}}`,
    });
  const arrays = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
  const timesRun = async () => textOf(await client.callTool({ name: 'recorded', arguments: {} }));

  it('refuses a lone surrogate in a value or a key with -32602 and 400, naming where it is; the tool never runs', async () => {
    for (const [args, path] of [
      [{ value: 'half \ud800 of a pair' }, 'arguments.value'],
      [{ value: ['ok', { 'key \udc00': 1 }] }, 'arguments.value[1]'],
      [{ value: { list: ['fine', 'x\udbff'] } }, 'arguments.value.list[1]'],
    ] as const) {
      const err = await refusal(args);
      expect(err.code, path).to.equal(-32602);
      expect(err.message)
        .to.include(path)
        .and.to.match(/lone surrogate/);
      expect(err.data).to.deep.include({ code: 'invalid_request', reason: 'lone_surrogate' });
      const res = await rest(args);
      expect(res.status, path).to.equal(400);
      const body = (await res.json()) as { code: string; message: string; details: { reason: string } };
      expect(body.code).to.equal('invalid_request');
      expect(body.details.reason).to.equal('lone_surrogate');
      expect(body.message).to.include(path);
    }
    expect(await timesRun()).to.equal('0');
  });

  it(`refuses arguments nested deeper than ${MAX_ARGUMENT_DEPTH} levels with -32602 and 400, however deep; the tool never runs`, async () => {
    const err = await refusal({ value: nested(MAX_ARGUMENT_DEPTH) });
    expect(err.code).to.equal(-32602);
    expect(err.data).to.deep.include({ code: 'invalid_request', reason: 'too_deep' });
    for (const depth of [MAX_ARGUMENT_DEPTH, 10_000, 50_000]) {
      // Without _meta the gateway reads the request itself; with it, the SDK's schema does.
      for (const meta of ['', '"_meta":{"progressToken":1},']) {
        const { error } = await rawCall(arrays(depth), meta);
        expect(error?.code, `${depth} ${meta}`).to.equal(-32602);
        expect(error?.data).to.deep.include({ code: 'invalid_request', reason: 'too_deep' });
      }
      const res = await rawRest(arrays(depth));
      expect(res.status, String(depth)).to.equal(400);
      expect(((await res.json()) as { details: { reason: string } }).details.reason).to.equal('too_deep');
    }
    expect(await timesRun()).to.equal('0');
    // The arguments object is level 1: its value may nest the rest.
    const deepest = await client.callTool({
      name: 'record',
      arguments: { value: nested(MAX_ARGUMENT_DEPTH - 1) },
    });
    expect(textOf(deepest)).to.equal('recorded 1');
  });

  it('applies the 100 KB argument limit to meta-tools, and to any call’s _meta, with the same -32602 and code as a server tool', async () => {
    const before = await timesRun();
    const oversized = 'x'.repeat(300 * 1024);
    const serverTool = await refusal({ value: oversized });
    expect(serverTool.code).to.equal(-32602);
    expect(serverTool.data).to.deep.include({ code: 'payload_too_large', limitBytes: 100 * 1024 });
    const gateway_ = await mcpClient(`${gateway.url}/mcp`, token, 'limits');
    try {
      for (const [name, args] of [
        ['gateway_search_servers', { query: 'hostile' }],
        ['gateway_describe_server', { serverId: 'hostile' }],
        ['gateway_enable_server', { serverId: 'hostile' }],
        ['gateway_disable_server', { serverId: 'hostile' }],
        ['gateway_list_enabled', {}],
      ] as const) {
        // Just under the limit the meta-tool answers; over it, it is refused as a server tool is.
        const fits = await gateway_.callTool({ name, arguments: { ...args, padding: 'x'.repeat(95_000) } });
        expect(fits.isError, `${name}: ${textOf(fits)}`).to.not.equal(true);
        const err = await gateway_.callTool({ name, arguments: { ...args, padding: oversized } }).then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(err, name).to.be.instanceOf(McpError);
        expect((err as McpError).code, name).to.equal(serverTool.code);
        expect((err as McpError).data, name).to.deep.include({ code: 'payload_too_large' });
      }
      expect(
        (await gateway_.callTool({ name: 'gateway_list_enabled', arguments: {} })).structuredContent,
      ).to.deep.equal({ enabled: [] });
      const meta = { 'io.example/blob': oversized };
      for (const [mcp, name] of [
        [gateway_, 'gateway_enable_server'],
        [client, 'record'],
      ] as const) {
        const err = await mcp
          .callTool({ name, arguments: { serverId: 'hostile', value: 1 }, _meta: meta })
          .then(
            () => undefined,
            (error: unknown) => error,
          );
        expect(err, name).to.be.instanceOf(McpError);
        expect((err as McpError).data, name).to.deep.include({ code: 'payload_too_large' });
      }
    } finally {
      await gateway_.close();
    }
    const res = await fetch(`${gateway.url}/api/servers/hostile/tools/record`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ arguments: { value: 1 }, _meta: { blob: oversized } }),
    });
    expect(res.status).to.equal(413);
    expect(((await res.json()) as { code: string }).code).to.equal('payload_too_large');
    expect(await timesRun()).to.equal(before);
  });

  it('refuses a number beyond a double (1e400, which parses as Infinity) with -32602 and 400; the tool never runs', async () => {
    const before = await timesRun();
    for (const value of ['1e400', '[1, {"n": -1e999}]']) {
      const { error } = await rawCall(value);
      expect(error?.code, value).to.equal(-32602);
      expect(error?.data).to.deep.include({ code: 'invalid_request', reason: 'not_finite' });
      const res = await rawRest(value);
      expect(res.status, value).to.equal(400);
      expect(((await res.json()) as { details: { reason: string } }).details.reason).to.equal('not_finite');
    }
    expect(await timesRun()).to.equal(before);
  });

  it('answers a number beyond a double in a result as null (as JSON.stringify writes it), proven', async () => {
    const result = (await client.callTool({ name: 'huge-number', arguments: {} })) as CallToolResult;
    expect(result.isError, textOf(result)).to.not.equal(true);
    expect(result.structuredContent).to.deep.equal({ n: null, list: [null] });
    expect(result._meta?.[PROOF_META_KEY]).to.be.an('object');
  });

  it('answers a lone surrogate in a result as U+FFFD (what JSON text can carry), proven, in values and keys', async () => {
    const result = (await client.callTool({ name: 'lone-surrogate', arguments: {} })) as CallToolResult;
    expect(result.isError).to.not.equal(true);
    expect(textOf(result)).to.equal('half \ufffd of a pair');
    expect(result.structuredContent).to.deep.equal({ 'key \ufffd': 'value' });
    const verified = await fetch(`${gateway.url}/api/verify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        proof: result._meta?.[PROOF_META_KEY],
        request: { serverId: 'hostile', tool: 'lone-surrogate', arguments: {} },
        response: result,
      }),
    });
    expect(verified.status).to.equal(200);
    expect(((await verified.json()) as { valid: boolean }).valid).to.equal(true);
  });

  it(`withholds a result nested deeper than ${MAX_RESULT_DEPTH} levels as a tool error (not a 500)`, async () => {
    const fine = await client.callTool({ name: 'deep', arguments: { depth: MAX_RESULT_DEPTH - 2 } });
    expect(fine.isError, textOf(fine)).to.not.equal(true);
    const result = await client.callTool({ name: 'deep', arguments: { depth: 100_000 } });
    expect(result.isError).to.equal(true);
    expect(textOf(result)).to.match(/nested deeper than/);
  });

  it('asks for the proof key before the tool runs: a key not available yet is a 503 with nothing run, and the next call gets it', async () => {
    const lateKey = await world.gateway(
      TEST_DATABASES[0],
      {},
      {
        tee: {
          resolve: fileURLToPath(new URL('../../fixtures/plugins/tee-key-late.ts', import.meta.url)),
          enabled: true,
          options: {},
        },
      },
    );
    try {
      const owner = await walletToken(lateKey.url);
      const call = () =>
        fetch(`${lateKey.url}/api/servers/hostile/tools/record`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${owner.token}` },
          body: JSON.stringify({ arguments: { value: 'side effect' } }),
        });
      const refused = await call();
      expect(refused.status).to.equal(503);
      expect(((await refused.json()) as { code: string }).code).to.equal('unavailable');
      const second = await call();
      expect(second.status).to.equal(200);
      // The same process of the same wallet: the refused call never reached the tool.
      expect(textOf(await second.json())).to.equal('recorded 1');
    } finally {
      await lateKey.stop();
    }
  });
});
