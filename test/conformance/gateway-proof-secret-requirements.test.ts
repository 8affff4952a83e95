import { createHash, createHmac, randomBytes, randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import canonicalize from 'canonicalize';
import { expect } from 'chai';
import { decodeJwt } from 'jose';
import type { CheckResult } from '@sigil/plugin-api/kit';
import { runDeployment } from '../../conformance/deployment/run.ts';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import {
  claimsModern,
  complete,
  DISCOVERED,
  fakeSignedInService,
  sendJson,
  startTinyServer,
  type TinyServer,
} from './support.ts';

/**
 * The proof, verify and secrets requirements against a small gateway that is not Sigil: other key
 * names for every proof field, the proof under other `_meta` keys, a stored-names list of another
 * shape. Conforming, it passes; each fault fails (or, without what a check needs, makes not
 * applicable) the requirement about it. Sigil itself is checked end to end in deployment-cli.test.ts.
 */

interface Faults {
  /** The proof has no git commit. */
  noCommit?: boolean;
  /** The request hash covers {tool, arguments} without the server id. */
  requestHashWithoutServer?: boolean;
  /** The signature does not cover the timestamp, so changing it goes unnoticed. */
  timestampUnsigned?: boolean;
  /** Refusals say no more than "invalid proof". */
  unnamedRefusals?: boolean;
  /** The env tool answers the secret's value as it is. */
  leakInResult?: boolean;
  /** The failing tool's error quotes the secret's value as it is. */
  leakInError?: boolean;
  /** GET /api/secrets/:serverId answers values with the names. */
  listsValues?: boolean;
  /** Secrets are kept per server only, whatever the wallet. */
  sharedSecrets?: boolean;
  /** The secrets routes answer anonymous requests. */
  anonymousSecrets?: boolean;
  /** No server declares a secret. */
  noSecretsDeclared?: boolean;
  /** Every tool call asks for an x402 payment. */
  paidToolCalls?: boolean;
  /** POST /api/verify asks for an x402 payment. */
  paidVerify?: boolean;
  /** No 2026-07-28: `_meta` is ignored and server/discover is unknown, as on a 2025-only gateway. */
  no2026?: boolean;
  /** A result at 2026-07-28 carries no proof. */
  noProofAt2026?: boolean;
  /** At 2026-07-28 the response hash covers `resultType: "complete"`, which the result as 2025-11-25 delivers it has not. */
  responseHashCoversResultType?: boolean;
}

const SERVER = 'vault-echo';
const DIGEST = `sha256:${'ab'.repeat(32)}`;
const PACKAGE = '@fake/vault-echo';
const TOOLS = [
  {
    name: 'say',
    description: 'Says the text back',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
  },
  {
    name: 'get_env',
    description: 'Reads one environment variable',
    inputSchema: { type: 'object', properties: { key: { type: 'string' } }, required: ['key'] },
  },
  {
    name: 'throw_error',
    description: 'Fails, quoting a variable',
    inputSchema: { type: 'object', properties: { variable: { type: 'string' } } },
  },
];

type Json = Record<string, unknown>;
const sha256 = (value: unknown) =>
  createHash('sha256')
    .update(canonicalize(value) ?? '')
    .digest('hex');
const text = (value: string) => ({ content: [{ type: 'text', text: value }] });
const omit = (value: Json, key: string): Json =>
  Object.fromEntries(Object.entries(value).filter(([k]) => k !== key));

function fakeGateway(faults: Faults) {
  const key = randomBytes(32);
  const mac = (fields: Json) =>
    createHmac('sha256', key)
      .update(canonicalize(faults.timestampUnsigned ? omit(fields, 'issued_at') : fields) ?? '')
      .digest('base64');
  /** Proofs handed out, by id, so a refusal can name what differs. */
  const issued = new Map<string, Json>();
  /** Secrets by wallet (or by nobody, when shared). */
  const vault = new Map<string, Record<string, string>>();
  const vaultKey = (wallet: string) => (faults.sharedSecrets ? 'everyone' : wallet);

  function walletOf(request: IncomingMessage): string | undefined {
    const header = request.headers.authorization;
    if (!header?.startsWith('Bearer ')) return undefined;
    return String(decodeJwt(header.slice(7)).sub);
  }

  function prove(tool: string, args: Json, result: Json, secretNames: string[]): Json {
    const fields: Json = {
      id: randomUUID(),
      gateway: {
        code_hash: createHash('sha256').update('fake').digest('hex'),
        ...(faults.noCommit ? {} : { commit: 'abc1234' }),
      },
      server: { package: PACKAGE, registry_digest: DIGEST },
      request_sha256: sha256(
        faults.requestHashWithoutServer
          ? { tool, arguments: args }
          : { serverId: SERVER, tool, arguments: args },
      ),
      response_sha256: sha256(result),
      issued_at: Math.floor(Date.now() / 1000),
      tee_status: 'none',
      secret_names: secretNames,
    };
    const proof = { ...fields, hmac: mac(fields) };
    issued.set(String(fields.id), proof);
    return proof;
  }

  function callTool(
    wallet: string | undefined,
    name: string,
    args: Json,
    modern = false,
  ): { result: Json; proof: Json } {
    const env = wallet === undefined ? {} : (vault.get(vaultKey(wallet)) ?? {});
    const redact = (value: string) =>
      Object.values(env).reduce((out, secret) => out.split(secret).join('***'), value);
    let result: Json;
    if (name === 'say') result = text(String(args.text));
    else if (name === 'get_env') {
      const value = env[String(args.key)] ?? '(unset)';
      result = text(faults.leakInResult ? value : redact(value));
    } else {
      const message = `exploded with ${String(args.variable)}=${env[String(args.variable)] ?? ''}`;
      result = { ...text(faults.leakInError ? message : redact(message)), isError: true };
    }
    const covered = modern && faults.responseHashCoversResultType ? complete(result) : result;
    return { result, proof: prove(name, args, covered, Object.keys(env)) };
  }

  function verify(body: { proof: Json; request?: Json; response?: Json }): [number, Json] {
    const { hmac, ...fields } = body.proof;
    const original = issued.get(String(fields.id));
    const changed = original
      ? Object.keys(body.proof).filter(
          (name) => JSON.stringify(original[name]) !== JSON.stringify(body.proof[name]),
        )
      : ['id'];
    const problems = hmac === mac(fields) ? [] : changed.length > 0 ? changed : ['hmac'];
    if (body.request && sha256(body.request) !== fields.request_sha256) problems.push('request_sha256');
    if (body.response && sha256(omit(omit(body.response, '_meta'), 'resultType')) !== fields.response_sha256)
      problems.push('response_sha256');
    if (problems.length === 0) return [200, { valid: true }];
    return [
      422,
      faults.unnamedRefusals ? { error: 'invalid proof' } : { error: 'invalid proof', fields: problems },
    ];
  }

  function secrets(request: IncomingMessage, body: string): [number, unknown] {
    const wallet = walletOf(request) ?? (faults.anonymousSecrets ? 'anonymous' : undefined);
    if (wallet === undefined) return [401, { error: 'sign in' }];
    const stored = vault.get(vaultKey(wallet)) ?? {};
    if (request.method === 'POST') {
      const given = (JSON.parse(body) as { secrets: Record<string, string> }).secrets;
      if (faults.noSecretsDeclared || Object.keys(given).some((name) => name !== 'API_KEY'))
        return [400, { error: 'undeclared secret' }];
      vault.set(vaultKey(wallet), { ...stored, ...given });
    } else if (request.method === 'DELETE') {
      vault.delete(vaultKey(wallet));
    }
    const now = vault.get(vaultKey(wallet)) ?? {};
    return [200, { secrets: faults.listsValues ? now : Object.keys(now) }];
  }

  /** 2025-11-25 after initialize, or 2026-07-28 (claimed in `_meta`, results framed as complete). */
  function rpc(request: IncomingMessage, body: string): [number, unknown] {
    const message = JSON.parse(body) as { id?: unknown; method: string; params?: Json };
    if (message.id === undefined) return [202, undefined];
    const params = message.params ?? {};
    const modern = !faults.no2026 && claimsModern(params);
    const ok = (result: object): [number, unknown] => [
      200,
      { jsonrpc: '2.0', id: message.id, result: modern ? complete(result) : result },
    ];
    if (message.method === 'initialize' && !modern)
      return ok({
        protocolVersion: '2025-06-18',
        capabilities: { tools: {} },
        serverInfo: { name: 'fake', version: '0' },
      });
    if (message.method === 'server/discover' && modern) return ok(DISCOVERED);
    if (message.method === 'tools/list') return ok({ tools: TOOLS });
    if (message.method !== 'tools/call')
      return [200, { jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'Method not found' } }];
    if (faults.paidToolCalls) return [402, { error: 'payment required' }];
    const { result, proof } = callTool(
      walletOf(request),
      String(params.name),
      (params.arguments ?? {}) as Json,
      modern,
    );
    if (modern && faults.noProofAt2026) return ok(result);
    return ok({ ...result, _meta: { 'example.org/proof': proof } });
  }

  return fakeSignedInService(
    ({ request, url, route, body }, response) => {
      const send = ([status, reply]: [number, unknown]) => {
        if (reply === undefined) {
          response.writeHead(status);
          return response.end();
        }
        sendJson(response, status, reply);
      };
      if (route === 'GET /api/servers') return sendJson(response, 200, [{ id: SERVER }]);
      if (route === `GET /api/servers/${SERVER}`) {
        return sendJson(response, 200, {
          id: SERVER,
          tier: 'tool_smoke_passed',
          smokeTool: 'say',
          package: PACKAGE,
          digest: DIGEST,
          secrets: faults.noSecretsDeclared ? [] : ['API_KEY'],
        });
      }
      if (route === `GET /api/servers/${SERVER}/tools`) return sendJson(response, 200, { tools: TOOLS });
      const tool = new RegExp(`^POST /api/servers/${SERVER}/tools/([a-z_]+)$`).exec(route);
      if (tool) {
        if (faults.paidToolCalls) return sendJson(response, 402, { error: 'payment required' });
        const args = ((JSON.parse(body) as { arguments?: Json }).arguments ?? {}) as Json;
        const { result, proof } = callTool(walletOf(request), tool[1] as string, args);
        return sendJson(response, 200, { ...result, _meta: { executionProof: proof } });
      }
      if (route === 'POST /api/verify') {
        if (faults.paidVerify) return sendJson(response, 402, { error: 'payment required' });
        return send(verify(JSON.parse(body) as Parameters<typeof verify>[0]));
      }
      if (url.pathname === `/api/secrets/${SERVER}`) return send(secrets(request, body));
      if (route === `POST /mcp/server/${SERVER}` || route === 'POST /mcp') return send(rpc(request, body));
      sendJson(response, 404, { error: 'not found' });
    },
    { authPrefix: '/api' },
  );
}

const IDS = [
  'GW-2.proof-fields',
  'GW-2.proof-request-response-hashes',
  'GW-4.verify-accepts',
  'GW-4.verify-mismatch',
  'GW-4.verify-tamper',
  'GW-4.verify-tamper-names-field',
  'GW-2.proof-mcp-2026',
  'GW-5.secrets-wallet-only',
  'GW-4.secrets-api',
  'GW-7.secret-redaction',
  'GW-2.secret-per-wallet',
];
const PROOF_IDS = IDS.slice(0, 7);
const SECRET_IDS = ['GW-4.secrets-api', 'GW-7.secret-redaction', 'GW-2.secret-per-wallet'];
const CANARY = /sigil-conformance-canary-[0-9a-f]{24}/;

describe('gateway proof, verify and secrets requirements against a gateway that is not Sigil', () => {
  let server: TinyServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function check(faults: Faults, ids: readonly string[] = IDS): Promise<Record<string, CheckResult>> {
    server = await startTinyServer(fakeGateway(faults));
    const report = await runDeployment(
      { runtimeUrl: server.url, gatewayUrl: server.url },
      { requirements: REQUIREMENTS.filter((requirement) => ids.includes(requirement.id)) },
    );
    // Whatever the gateway leaks, the report never shows a secret's value.
    expect(JSON.stringify(report)).not.to.match(CANARY);
    return Object.fromEntries(report.results.map((result) => [result.id, result]));
  }
  const expectFailure = (result: CheckResult | undefined, reason: RegExp) => {
    expect(result?.status, result?.reason).to.equal('fail');
    expect(result?.reason).to.match(reason);
  };

  it('every requirement is in the catalog and passes on a conforming gateway with other names and bodies', async () => {
    for (const id of IDS) expect(REQUIREMENTS.map((requirement) => requirement.id)).to.include(id);
    const results = await check({});
    const notPassed = Object.values(results).filter((result) => result.status !== 'pass');
    expect(notPassed.map((result) => `${result.id}: ${result.reason}`)).to.deep.equal([]);
    expect(Object.keys(results)).to.have.length(IDS.length);
  });

  it('fails GW-2.proof-fields when a field is missing, naming it', async () => {
    const results = await check({ noCommit: true }, ['GW-2.proof-fields']);
    expectFailure(results['GW-2.proof-fields'], /the proof of tools\/call say .* has no gateway git commit/);
  });

  it('fails GW-2.proof-request-response-hashes when the request hash covers another form', async () => {
    const results = await check({ requestHashWithoutServer: true }, ['GW-2.proof-request-response-hashes']);
    expectFailure(
      results['GW-2.proof-request-response-hashes'],
      /SHA-256 of the request .* expected [0-9a-f]{64}/,
    );
  });

  it('fails GW-4.verify-tamper when one changed field is accepted, naming the leaf', async () => {
    const results = await check({ timestampUnsigned: true }, ['GW-4.verify-tamper']);
    expectFailure(results['GW-4.verify-tamper'], /accepted the proof with issued_at changed$/);
  });

  it('fails only the SHOULD when refusals do not name the changed field', async () => {
    const results = await check({ unnamedRefusals: true }, [
      'GW-4.verify-tamper',
      'GW-4.verify-tamper-names-field',
    ]);
    expect(results['GW-4.verify-tamper']?.status).to.equal('pass');
    expectFailure(
      results['GW-4.verify-tamper-names-field'],
      /do not name the changed field: id \(named nothing/,
    );
    expect(results['GW-4.verify-tamper-names-field']?.level).to.equal('SHOULD');
  });

  it('fails GW-2.proof-mcp-2026 when a result at 2026-07-28 carries no proof, or one over another response', async () => {
    const id = 'GW-2.proof-mcp-2026';
    const missing = await check({ noProofAt2026: true }, [id, 'GW-2.proof-fields']);
    expect(missing['GW-2.proof-fields']?.status).to.equal('pass');
    expectFailure(
      missing[id],
      /^the result of tools\/call \(MCP 2026-07-28\) say at POST \/mcp\/server\/vault-echo carries no execution proof: .* \(_meta keys: none\)$/,
    );
    await server?.close();
    const framed = await check({ responseHashCoversResultType: true }, [
      id,
      'GW-2.proof-request-response-hashes',
    ]);
    expect(framed['GW-2.proof-request-response-hashes']?.status).to.equal('pass');
    expectFailure(
      framed[id],
      /^SHA-256 of the response in the proof of tools\/call \(MCP 2026-07-28\) say at POST \/mcp\/server\/vault-echo is "[0-9a-f]{64}", expected [0-9a-f]{64} \(of the result without _meta\)$/,
    );
  });

  it('reports GW-2.proof-mcp-2026 not applicable on a gateway that speaks only 2025-11-25', async () => {
    const results = await check({ no2026: true }, ['GW-2.proof-mcp-2026']);
    expect(results['GW-2.proof-mcp-2026']?.status).to.equal('not-applicable');
    expect(results['GW-2.proof-mcp-2026']?.reason).to.match(/^the gateway does not serve MCP 2026-07-28 /);
  });

  for (const [fault, where] of [
    ['leakInResult', /tools\/call get_env|POST \/api\/servers\/vault-echo\/tools\/get_env/],
    ['leakInError', /POST \/mcp\/server\/vault-echo → HTTP 200/],
  ] as const) {
    it(`fails GW-7.secret-redaction when a secret's value comes back (${fault})`, async () => {
      const results = await check({ [fault]: true }, ['GW-7.secret-redaction']);
      expectFailure(results['GW-7.secret-redaction'], /the secret's value came back in/);
      expect(results['GW-7.secret-redaction']?.reason).to.match(where);
    });
  }

  it('fails GW-4.secrets-api when GET answers values', async () => {
    const results = await check({ listsValues: true }, ['GW-4.secrets-api']);
    expectFailure(
      results['GW-4.secrets-api'],
      /the secret's value came back in .*GET \/api\/secrets\/vault-echo/,
    );
  });

  it('fails GW-4.secrets-api and GW-2.secret-per-wallet when wallets share secrets', async () => {
    const results = await check({ sharedSecrets: true }, ['GW-4.secrets-api', 'GW-2.secret-per-wallet']);
    expectFailure(results['GW-4.secrets-api'], /as another wallet lists API_KEY/);
    expectFailure(results['GW-2.secret-per-wallet'], /names API_KEY, which only the first wallet stored/);
  });

  it('fails GW-5.secrets-wallet-only when anonymous requests are answered', async () => {
    const results = await check({ anonymousSecrets: true }, ['GW-5.secrets-wallet-only']);
    expectFailure(
      results['GW-5.secrets-wallet-only'],
      /anonymous GET \/api\/secrets\/vault-echo: expected HTTP 401, got 200/,
    );
  });

  it('reports the secret checks not applicable when no server declares a secret, saying so', async () => {
    const results = await check({ noSecretsDeclared: true }, [...SECRET_IDS, 'GW-5.secrets-wallet-only']);
    for (const id of SECRET_IDS) {
      expect(results[id]?.status, id).to.equal('not-applicable');
      expect(results[id]?.reason, id).to.match(/declares (no secret|none)/);
    }
    expect(results['GW-5.secrets-wallet-only']?.status).to.equal('pass');
  });

  it('reports proof and redaction checks not applicable when tool calls or verification ask for a payment', async () => {
    const paidCalls = await check({ paidToolCalls: true }, [
      ...PROOF_IDS,
      'GW-7.secret-redaction',
      'GW-2.secret-per-wallet',
    ]);
    for (const result of Object.values(paidCalls)) {
      expect(result.status, result.id).to.equal('not-applicable');
      expect(result.reason, result.id).to.match(/x402 payment .*HTTP 402/);
    }
    await server?.close();
    const paidVerify = await check({ paidVerify: true }, PROOF_IDS.slice(2));
    for (const result of Object.values(paidVerify)) {
      expect(result.status, result.id).to.equal('not-applicable');
      expect(result.reason, result.id).to.match(/POST \/api\/verify asks for an x402 payment/);
    }
  });
});
