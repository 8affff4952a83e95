import { classifyInboundRequest, createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { expect } from 'chai';
import { ENVELOPE } from '../../../core/mcp/era.ts';
import { classify } from '../../../services/gateway/mcp/jsonrpc.ts';
import {
  classifyRevision,
  decodeHeaderValue,
  isRejection,
  LEGACY_VERSIONS,
  MODERN_METHODS,
  type RevisionInput,
  type RevisionVerdict,
} from '../../../services/gateway/mcp/revision.ts';

const MODERN = '2026-07-28';
const envelope = (extra: Record<string, unknown> = {}) => ({
  [ENVELOPE.protocolVersion]: MODERN,
  [ENVELOPE.clientCapabilities]: {},
  ...extra,
});
/** The headers an SDK v2 client sends with a request of `method` (and `name`, for tools/call). */
const modernHeaders = (method: string, name?: string) => ({
  headerVersion: MODERN,
  mcpMethod: method,
  mcpName: name ?? '',
});
const noHeaders = { headerVersion: '', mcpMethod: '', mcpName: '' };

type Expected = { era: 'legacy' | 'modern'; version: string } | { status: number; code: number };

interface Cell {
  name: string;
  kind?: 'request' | 'notification';
  headers: Omit<RevisionInput, 'message'>;
  method: string;
  params?: unknown;
  expected: Expected;
}

const call = (meta?: Record<string, unknown>, name = 'probe__echo') => ({
  name,
  arguments: {},
  ...(meta && { _meta: meta }),
});

/** Every rung of the ladder (docs/mcp-revisions.md), each cell one request and its verdict. */
const LADDER: Cell[] = [
  // 2025-11-25 and older: unchanged.
  {
    name: 'initialize, no header',
    headers: noHeaders,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25' },
    expected: { era: 'legacy', version: '2025-03-26' },
  },
  {
    name: 'tools/call, 2025-11-25 header',
    headers: { ...noHeaders, headerVersion: '2025-11-25' },
    method: 'tools/call',
    params: call(),
    expected: { era: 'legacy', version: '2025-11-25' },
  },
  {
    name: 'tools/call with a plain _meta (payment, progress) is still legacy',
    headers: { ...noHeaders, headerVersion: '2025-06-18' },
    method: 'tools/call',
    params: call({ progressToken: 1, 'x402/payment': {} }),
    expected: { era: 'legacy', version: '2025-06-18' },
  },
  {
    name: 'server/discover without an envelope is a legacy request (-32601 in-band)',
    headers: noHeaders,
    method: 'server/discover',
    expected: { era: 'legacy', version: '2025-03-26' },
  },
  {
    name: 'a legacy header of no revision served',
    headers: { ...noHeaders, headerVersion: '1999-01-01' },
    method: 'ping',
    expected: { status: 400, code: -32022 },
  },
  // The handshake.
  {
    name: 'initialize with a modern header and no envelope',
    headers: modernHeaders('initialize'),
    method: 'initialize',
    params: { protocolVersion: MODERN },
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'initialize with a modern envelope is not served at 2026-07-28',
    headers: modernHeaders('initialize'),
    method: 'initialize',
    params: { _meta: envelope() },
    expected: { status: 404, code: -32601 },
  },
  {
    name: 'initialize with a malformed envelope stays the legacy handshake',
    headers: noHeaders,
    method: 'initialize',
    params: { _meta: { [ENVELOPE.protocolVersion]: MODERN } },
    expected: { era: 'legacy', version: '2025-03-26' },
  },
  // A modern header without a claim.
  {
    name: 'a 2026-07-28 header without _meta',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'a 2026-07-28 header with a _meta that has no envelope keys',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: { progressToken: 'p' } },
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'a future header (v999.0.0) without _meta',
    headers: { ...noHeaders, headerVersion: 'v999.0.0' },
    method: 'tools/list',
    expected: { status: 400, code: -32602 },
  },
  // A malformed envelope.
  {
    name: 'protocolVersion not a string',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.protocolVersion]: 20260728 }) },
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'clientCapabilities missing',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: { [ENVELOPE.protocolVersion]: MODERN } },
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'clientCapabilities an array',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.clientCapabilities]: [] }) },
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'a capability not an object',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.clientCapabilities]: { sampling: true } }) },
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'clientInfo without a version',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.clientInfo]: { name: 'c' } }) },
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'an unknown logLevel',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.logLevel]: 'loud' }) },
    expected: { status: 400, code: -32602 },
  },
  {
    // The request schema refuses it before the revision is looked at.
    name: 'a progressToken that is an object',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: envelope({ progressToken: {} }) },
    expected: { status: 400, code: -32600 },
  },
  // Headers that disagree with the body.
  {
    name: 'header 2025-11-25, _meta 2026-07-28',
    headers: { ...modernHeaders('tools/list'), headerVersion: '2025-11-25' },
    method: 'tools/list',
    params: { _meta: envelope() },
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'Mcp-Method names another method',
    headers: modernHeaders('tools/list'),
    method: 'tools/call',
    params: call(envelope()),
    expected: { status: 400, code: -32020 },
  },
  // Revisions not served per request (mixed revisions).
  {
    name: '2025-11-25 inside _meta, header 2025-11-25',
    headers: { ...modernHeaders('tools/list'), headerVersion: '2025-11-25' },
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.protocolVersion]: '2025-11-25' }) },
    expected: { status: 400, code: -32022 },
  },
  {
    name: '2025-11-25 inside _meta, no header',
    headers: noHeaders,
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.protocolVersion]: '2025-11-25' }) },
    expected: { status: 400, code: -32022 },
  },
  {
    name: 'a future revision inside _meta and in the header',
    headers: { ...modernHeaders('tools/list'), headerVersion: '2027-01-01' },
    method: 'tools/list',
    params: { _meta: envelope({ [ENVELOPE.protocolVersion]: '2027-01-01' }) },
    expected: { status: 400, code: -32022 },
  },
  // Standard headers a modern request must carry (SEP-2243).
  {
    name: 'no MCP-Protocol-Version header',
    headers: { ...modernHeaders('tools/list'), headerVersion: '' },
    method: 'tools/list',
    params: { _meta: envelope() },
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'no Mcp-Method header',
    headers: { ...modernHeaders('tools/list'), mcpMethod: '' },
    method: 'tools/list',
    params: { _meta: envelope() },
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'tools/call without Mcp-Name',
    headers: modernHeaders('tools/call'),
    method: 'tools/call',
    params: call(envelope()),
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'tools/call whose Mcp-Name names another tool',
    headers: modernHeaders('tools/call', 'probe__fail'),
    method: 'tools/call',
    params: call(envelope()),
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'tools/call whose Mcp-Name is not canonical base64',
    headers: modernHeaders('tools/call', '=?base64?not base64?='),
    method: 'tools/call',
    params: call(envelope()),
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'tools/call whose Mcp-Name is the name in base64',
    headers: modernHeaders('tools/call', `=?base64?${Buffer.from('probe__echo').toString('base64')}?=`),
    method: 'tools/call',
    params: call(envelope()),
    expected: { era: 'modern', version: MODERN },
  },
  {
    name: 'tools/call without a name needs no Mcp-Name (its params are refused in-band)',
    headers: modernHeaders('tools/call'),
    method: 'tools/call',
    params: { arguments: {}, _meta: envelope() },
    expected: { era: 'modern', version: MODERN },
  },
  // Methods.
  {
    name: 'server/discover',
    headers: modernHeaders('server/discover'),
    method: 'server/discover',
    params: { _meta: envelope() },
    expected: { era: 'modern', version: MODERN },
  },
  {
    name: 'tools/list',
    headers: modernHeaders('tools/list'),
    method: 'tools/list',
    params: { _meta: envelope() },
    expected: { era: 'modern', version: MODERN },
  },
  {
    name: 'tools/call',
    headers: modernHeaders('tools/call', 'probe__echo'),
    method: 'tools/call',
    params: call(envelope()),
    expected: { era: 'modern', version: MODERN },
  },
  ...[
    'ping',
    'logging/setLevel',
    'resources/list',
    'resources/subscribe',
    'prompts/get',
    'subscriptions/listen',
    'no/such',
  ].map((method): Cell => ({
    name: `${method} is not served at 2026-07-28`,
    headers: modernHeaders(method),
    method,
    params: { _meta: envelope() },
    expected: { status: 404, code: -32601 },
  })),
  // Notifications: no headers required, a bad claim still refused.
  {
    name: 'notifications/initialized',
    kind: 'notification',
    headers: noHeaders,
    method: 'notifications/initialized',
    expected: { era: 'legacy', version: '2025-03-26' },
  },
  {
    name: 'a modern header on a notification without a claim',
    kind: 'notification',
    headers: modernHeaders('notifications/cancelled'),
    method: 'notifications/cancelled',
    expected: { era: 'modern', version: MODERN },
  },
  {
    name: 'a notification with a claim and no headers',
    kind: 'notification',
    headers: noHeaders,
    method: 'notifications/x',
    params: { _meta: { [ENVELOPE.protocolVersion]: MODERN } },
    expected: { era: 'modern', version: MODERN },
  },
  {
    name: 'a notification whose claim is not a string',
    kind: 'notification',
    headers: noHeaders,
    method: 'notifications/x',
    params: { _meta: { [ENVELOPE.protocolVersion]: null } },
    expected: { status: 400, code: -32602 },
  },
  {
    name: 'a notification whose header disagrees with its claim',
    kind: 'notification',
    headers: { ...noHeaders, headerVersion: '2025-11-25' },
    method: 'notifications/x',
    params: { _meta: { [ENVELOPE.protocolVersion]: MODERN } },
    expected: { status: 400, code: -32020 },
  },
  {
    name: 'a notification whose Mcp-Method disagrees',
    kind: 'notification',
    headers: modernHeaders('notifications/y'),
    method: 'notifications/x',
    expected: { status: 400, code: -32020 },
  },
];

/**
 * What the endpoint answers a cell before any handler runs: the JSON-RPC shape (jsonrpc.ts), then the
 * revision (revision.ts), as endpoint.ts calls them.
 */
function verdictOf(cell: Cell): Expected {
  const message = {
    jsonrpc: '2.0',
    method: cell.method,
    ...(cell.params !== undefined && { params: cell.params }),
  };
  const kind = cell.kind ?? 'request';
  const parsed = classify(kind === 'request' ? { ...message, id: 1 } : message);
  if (parsed.kind === 'invalid')
    return { status: 400, code: (parsed.reply as { error: { code: number } }).error.code };
  const verdict: RevisionVerdict = classifyRevision(
    { ...cell.headers, message: parsed.message },
    parsed.kind,
  );
  return isRejection(verdict)
    ? { status: verdict.reject.status, code: verdict.reject.error.code }
    : { era: verdict.era, version: verdict.version };
}

describe('MCP revisions: the per-request validation ladder (revision.ts)', () => {
  for (const cell of LADDER) {
    it(`${cell.name}: ${'status' in cell.expected ? `${cell.expected.status} / ${cell.expected.code}` : cell.expected.era}`, () => {
      expect(verdictOf(cell)).to.deep.equal(cell.expected);
    });
  }

  /**
   * The SDK v2 server's verdict on a cell: its classifier, then (for what it classifies modern) its
   * HTTP entry with the supported-revision gate, the standard headers and the method registry, serving
   * a server with the cell's tool; an answer of 200 is "served". Where the SDK leaves the choice to
   * the server, the gateway's: a legacy header of no revision served is -32022 (the SDK's legacy
   * fallback does not check it), and `subscriptions/listen` (which the SDK serves) is 404.
   */
  async function sdkVerdict(cell: Cell): Promise<Expected> {
    const message = {
      jsonrpc: '2.0',
      method: cell.method,
      ...(cell.params !== undefined && { params: cell.params }),
    };
    const body = (cell.kind ?? 'request') === 'request' ? { ...message, id: 1 } : message;
    const { headerVersion, mcpMethod, mcpName } = cell.headers;
    const route = classifyInboundRequest({
      httpMethod: 'POST',
      body,
      ...(headerVersion && { protocolVersionHeader: headerVersion }),
      ...(mcpMethod && { mcpMethodHeader: mcpMethod }),
      ...(mcpName && { mcpNameHeader: mcpName }),
    });
    if (route.kind === 'reject') return { status: route.httpStatus, code: route.code };
    if (route.kind === 'legacy') {
      if (headerVersion !== '' && !LEGACY_VERSIONS.includes(headerVersion))
        return { status: 400, code: -32022 };
      return { era: 'legacy', version: headerVersion || '2025-03-26' };
    }
    if (cell.method === 'subscriptions/listen') return { status: 404, code: -32601 };
    const answer = await sdkHandler.fetch(
      new Request('http://127.0.0.1/mcp', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...(headerVersion && { 'mcp-protocol-version': headerVersion }),
          ...(mcpMethod && { 'mcp-method': mcpMethod }),
          ...(mcpName && { 'mcp-name': mcpName }),
        },
        body: JSON.stringify(body),
      }),
    );
    if (answer.status === 200 || answer.status === 202) {
      await answer.body?.cancel();
      return { era: 'modern', version: route.classification.revision ?? '' };
    }
    return { status: answer.status, code: ((await answer.json()) as { error: { code: number } }).error.code };
  }

  const sdkHandler = createMcpHandler(() => {
    const server = new McpServer({ name: 'sdk', version: '1.0.0' });
    for (const name of ['probe__echo', 'probe__fail'])
      server.registerTool(name, { description: name }, () => ({ content: [{ type: 'text', text: name }] }));
    return server;
  });
  after(() => sdkHandler.close());

  it('agrees with the SDK v2 server on every cell', async () => {
    for (const cell of LADDER) expect(await sdkVerdict(cell), cell.name).to.deep.equal(cell.expected);
  });

  it('names what was expected: the envelope key, the versions served, the header that disagrees', () => {
    const reject = (headers: Omit<RevisionInput, 'message'>, method: string, params: unknown) => {
      const verdict = classifyRevision({ ...headers, message: { method, params, id: 1 } }, 'request');
      if (!isRejection(verdict)) throw new Error('not refused');
      return verdict.reject.error;
    };
    const missingCaps = reject(modernHeaders('tools/list'), 'tools/list', {
      _meta: { [ENVELOPE.protocolVersion]: MODERN },
    });
    expect(missingCaps.message).to.equal(
      'Invalid _meta envelope for MCP 2026-07-28: expected _meta["io.modelcontextprotocol/clientCapabilities"] to be an object; it is missing',
    );
    expect(missingCaps.data).to.deep.equal({
      envelope: { key: ENVELOPE.clientCapabilities, problem: 'missing' },
    });
    const notString = reject(modernHeaders('tools/list'), 'tools/list', {
      _meta: envelope({ [ENVELOPE.protocolVersion]: 7 }),
    });
    expect(notString.message).to.match(
      /expected _meta\["io\.modelcontextprotocol\/protocolVersion"\] to be a protocol version string .*; it is a number/,
    );
    const noEnvelope = reject(modernHeaders('tools/list'), 'tools/list', {});
    expect(noEnvelope.message).to.match(
      /MCP-Protocol-Version header names 2026-07-28, but .* expected params\._meta/,
    );
    expect(noEnvelope.data).to.deep.equal({ envelope: { missing: ['_meta'] } });
    const mixed = reject(noHeaders, 'tools/list', {
      _meta: envelope({ [ENVELOPE.protocolVersion]: '2025-11-25' }),
    });
    expect(mixed.data).to.deep.equal({ supported: [MODERN], requested: '2025-11-25' });
    expect(mixed.message).to.match(/negotiated with initialize .*mixed revisions/);
    const unknown = reject({ ...noHeaders, headerVersion: '1999-01-01' }, 'ping', undefined);
    expect(unknown.data).to.deep.equal({ supported: [MODERN], requested: '1999-01-01' });
    expect(unknown.message).to.include('2025-11-25');
    const header = reject({ ...modernHeaders('tools/list'), headerVersion: '2025-11-25' }, 'tools/list', {
      _meta: envelope(),
    });
    expect(header.data).to.deep.equal({
      mismatch: {
        header: '2025-11-25',
        body: "the body's _meta names protocol version 2026-07-28 but the MCP-Protocol-Version header names 2025-11-25",
      },
    });
  });

  it('carries a modern request’s client capabilities, client info and log level', () => {
    const verdict = classifyRevision(
      {
        ...modernHeaders('server/discover'),
        message: {
          method: 'server/discover',
          id: 1,
          params: {
            _meta: envelope({
              [ENVELOPE.clientCapabilities]: { sampling: {} },
              [ENVELOPE.clientInfo]: { name: 'c', version: '1' },
              [ENVELOPE.logLevel]: 'warning',
            }),
          },
        },
      },
      'request',
    );
    expect(verdict).to.deep.equal({
      era: 'modern',
      version: MODERN,
      clientCapabilities: { sampling: {} },
      clientInfo: { name: 'c', version: '1' },
      logLevel: 'warning',
    });
  });

  it('never throws, and refuses anything odd with a 4xx', () => {
    const odd: unknown[] = [
      null,
      7,
      'x',
      [],
      [1],
      { _meta: null },
      { _meta: [] },
      { _meta: 'm' },
      { name: 5, _meta: envelope() },
    ];
    const metas: unknown[] = [
      { [ENVELOPE.protocolVersion]: {} },
      { [ENVELOPE.protocolVersion]: '' },
      { [ENVELOPE.protocolVersion]: MODERN, [ENVELOPE.clientCapabilities]: null },
      Object.create(null),
    ];
    for (const params of [...odd, ...metas.map((meta) => ({ _meta: meta }))]) {
      for (const headers of [
        noHeaders,
        modernHeaders('tools/call', '=?base64?'),
        { ...noHeaders, headerVersion: '\u00ff' },
      ]) {
        for (const method of ['tools/call', 'initialize', 'constructor', '__proto__']) {
          const verdict = classifyRevision({ ...headers, message: { method, params, id: 1 } }, 'request');
          if (isRejection(verdict)) expect([400, 404]).to.include(verdict.reject.status);
        }
      }
    }
  });

  it('decodes Mcp-Name as SEP-2243 writes it', () => {
    expect(decodeHeaderValue('plain')).to.equal('plain');
    expect(decodeHeaderValue(`=?base64?${Buffer.from('héllo').toString('base64')}?=`)).to.equal('héllo');
    expect(decodeHeaderValue('=?base64?aGk?=')).to.equal(undefined); // unpadded
    expect(decodeHeaderValue('=?base64?/w==?=')).to.equal(undefined); // not UTF-8
  });

  it('serves server/discover, tools/list and tools/call at 2026-07-28', () => {
    expect([...MODERN_METHODS].sort()).to.deep.equal(['server/discover', 'tools/call', 'tools/list']);
  });
});
