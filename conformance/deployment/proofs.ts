import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { z } from 'zod';
import { ensure, excerpt, expectShape, failWith, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import { path, type ServableServer, type ServerCondition } from './catalog.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectJson } from './expect.ts';
import {
  CALL_TIMEOUT_MS,
  callToolResultSchema,
  McpConnection,
  MODERN_PROTOCOL_VERSION,
  notApplicableIfPaymentRequired,
  PAYER_OPTIONS,
  textOf,
  type CallToolResult,
} from './mcp.ts';
import { requestPaying } from './payer.ts';
import { perServer } from './payments/messages.ts';
import { smokeCall } from './tool-calls.ts';

/**
 * Execution proofs (gateway spec part 2, "Execution proof"; part 1, every result comes with one;
 * part 4, POST /api/verify). The spec names what a proof holds, not how it is written down, so fields
 * are found by what their names say (`codeHash`, `requestHash`, `secretNames`…), shallowest first, and
 * the proof itself in the result's `_meta` under Sigil's key, another `_meta` entry named like a
 * proof, or a `proof` field. Changing a proof is tried leaf by leaf, each leaf changed by one character
 * (a digit for a digit, a letter for a letter, so a format check alone cannot catch it).
 */

/** Where Sigil puts the proof in a tool result's `_meta`. */
export const SIGIL_PROOF_KEY = 'io.sigil/execution-proof';

const VERIFY = '/api/verify';
const SPEC_PROOF =
  'gateway spec part 2, Execution proof: "gateway code hash and git commit; server package and registry digest; SHA-256 hashes of request and response; HMAC-SHA256 signature; timestamp; TEE status; names of injected secrets"';
const SPEC_VERIFY = `gateway spec part 4, REST endpoints: "POST /api/verify: verify an execution proof"; ${SPEC_PROOF}`;

type Json = Record<string, unknown>;
export const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** `requestHash`, `request_hash` and `RequestHash` all read `requesthash`. */
export const normalized = (key: string): string => key.toLowerCase().replace(/[^a-z0-9]/g, '');

/** One part of a proof the spec names, recognised by its key and judged by its value. */
interface ProofField {
  label: string;
  key: RegExp;
  /** Why the value is not one, or undefined when it is. */
  problem(value: unknown): string | undefined;
}

const nonEmptyString = (value: unknown): string | undefined =>
  typeof value === 'string' && value.trim() !== '' ? undefined : 'is not a non-empty string';

/** 32 bytes as hex (optionally `sha256:`-prefixed) or base64/base64url: a SHA-256 or HMAC-SHA256 value. */
export function bytes32(value: unknown): Buffer | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.replace(/^sha-?256[:-]/i, '');
  if (/^[0-9a-fA-F]{64}$/.test(text)) return Buffer.from(text, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}={0,1}$/.test(text)) {
    const decoded = Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
    if (decoded.length === 32) return decoded;
  }
  return undefined;
}

const sha256Value = (value: unknown): string | undefined =>
  bytes32(value) === undefined ? 'is not a SHA-256 value (32 bytes as hex or base64)' : undefined;

/** A proof's timestamp is taken when the call ran: within this much of the runner's clock. */
const TIMESTAMP_TOLERANCE_MS = 60 * 60 * 1000;

export const PROOF_FIELDS = {
  codeHash: { label: 'gateway code hash', key: /codehash|sourcehash/, problem: nonEmptyString },
  gitCommit: { label: 'gateway git commit', key: /commit/, problem: nonEmptyString },
  package: { label: 'server package', key: /package/, problem: nonEmptyString },
  digest: { label: 'registry digest', key: /^(?!.*(request|response)).*digest/, problem: nonEmptyString },
  requestHash: {
    label: 'SHA-256 of the request',
    key: /request.*(hash|sha256|digest)|(hash|sha256|digest).*request/,
    problem: sha256Value,
  },
  responseHash: {
    label: 'SHA-256 of the response',
    key: /response.*(hash|sha256|digest)|(hash|sha256|digest).*response/,
    problem: sha256Value,
  },
  timestamp: {
    label: 'timestamp',
    key: /timestamp|^time$|issuedat|createdat|executedat/,
    problem: (value) => {
      const ms =
        typeof value === 'string'
          ? Date.parse(value)
          : typeof value === 'number'
            ? value < 1e12
              ? value * 1000
              : value
            : NaN;
      if (Number.isNaN(ms)) return 'is not a date (an ISO string or a unix time)';
      return Math.abs(ms - Date.now()) > TIMESTAMP_TOLERANCE_MS
        ? `is ${new Date(ms).toISOString()}, over an hour from the runner's clock (${new Date().toISOString()})`
        : undefined;
    },
  },
  tee: {
    label: 'TEE status',
    key: /^tee/,
    problem: (value) =>
      typeof value === 'boolean' ||
      (typeof value === 'string' && value !== '') ||
      (isObject(value) && Object.values(value).some((inner) => typeof inner === 'boolean'))
        ? undefined
        : 'is neither a boolean, a status string, nor an object with a boolean',
  },
  secretNames: {
    label: 'names of injected secrets',
    key: /secret/,
    problem: (value) =>
      Array.isArray(value) && value.every((name) => typeof name === 'string')
        ? undefined
        : 'is not a list of names',
  },
  signature: {
    label: 'HMAC-SHA256 signature',
    key: /signature|hmac/,
    problem: (value) =>
      bytes32(value) === undefined ? 'is not an HMAC-SHA256 value (32 bytes as hex or base64)' : undefined,
  },
} satisfies Record<string, ProofField>;

export type ProofFieldName = keyof typeof PROOF_FIELDS;

export interface Found {
  /** Path from the proof's root, e.g. ['server', 'digest']. */
  path: string[];
  value: unknown;
}

/** The shallowest node of `proof` whose key names `field` (a per-field MAC map nests deeper). */
export function findField(proof: Json, field: ProofFieldName): Found | undefined {
  let level: Found[] = [{ path: [], value: proof }];
  while (level.length > 0) {
    const next: Found[] = [];
    for (const node of level) {
      if (!isObject(node.value)) continue;
      for (const [key, value] of Object.entries(node.value)) {
        const found = { path: [...node.path, key], value };
        if (PROOF_FIELDS[field].key.test(normalized(key))) return found;
        next.push(found);
      }
    }
    level = next;
  }
  return undefined;
}

export const dotted = (segments: readonly string[]): string => segments.join('.');

/** The proof a tool result carries, or a failure that says where the runner looked. */
export function findProof(result: Json, where: string): Json {
  const meta = isObject(result._meta) ? result._meta : {};
  const candidates = [
    meta[SIGIL_PROOF_KEY],
    ...Object.entries(meta)
      .filter(([key]) => /proof/i.test(key))
      .map(([, value]) => value),
    result.proof,
    result.executionProof,
    result.execution_proof,
  ];
  const proof = candidates.find(
    (candidate): candidate is Json => isObject(candidate) && findField(candidate, 'signature') !== undefined,
  );
  if (proof === undefined) {
    failWith(
      `${where} carries no execution proof: looked for _meta["${SIGIL_PROOF_KEY}"], a _meta entry named like "proof" and a "proof" field, each an object with a signature (_meta keys: ${Object.keys(meta).join(', ') || 'none'})`,
    );
  }
  return proof;
}

/** What a check calls a tool with and gets back, proof included. */
export interface ProvenCall {
  serverId: string;
  tool: string;
  arguments: Json;
  /** The tool result as the client got it, `_meta` and all. */
  result: Json;
  proof: Json;
  /** Where it came from, for reasons: "tools/call echo at POST /mcp/server/probe". */
  where: string;
}

/** A tools/call whose result is kept whole (`McpConnection.callTool` keeps only the content). */
export async function callKeepingMeta(
  connection: McpConnection,
  name: string,
  args: Json,
): Promise<{ result: Json; where: string }> {
  const where = `${connection.what('tools/call')} ${name} at POST ${connection.path}`;
  const reply = await connection.callToolReply(name, args, CALL_TIMEOUT_MS);
  notApplicableIfPaymentRequired(reply, connection.context);
  const result = connection.result(reply, where);
  expectShape(callToolResultSchema, result, `${where}: the result is not a CallToolResult`);
  return { result, where };
}

/** POST /api/servers/:id/tools/:name, the REST face of the same call. */
export async function callOverRest(
  context: DeploymentContext,
  serverId: string,
  name: string,
  args: Json,
  headers: Record<string, string> = {},
): Promise<{ result: Json; where: string; response: HttpResponse }> {
  const where = `POST ${path.tool(serverId, name)}`;
  const { response } = await requestPaying(
    context,
    {
      service: 'gateway',
      method: 'POST',
      path: path.tool(serverId, name),
      headers,
      json: { arguments: args },
      timeoutMs: CALL_TIMEOUT_MS,
    },
    where,
  );
  notApplicableIfPaymentRequired({ response }, context);
  const result = expectJson(response, 200, callToolResultSchema.loose(), where) as Json;
  return { result, where, response };
}

type SmokeCall = Awaited<ReturnType<typeof smokeCall>>;

/** A call of the smoke tool, kept whole, with the proof it must carry and no tool error. */
function provenCall({ server, tool, args }: SmokeCall, call: { result: Json; where: string }): ProvenCall {
  const serverId = server.view.id;
  ensure(
    call.result.isError !== true,
    `${call.where} (the smoke tool of ${serverId}) answered a tool error: ${excerpt(textOf(call.result as CallToolResult), 300)}`,
  );
  return {
    serverId,
    tool: tool.name,
    arguments: args,
    result: call.result,
    proof: findProof(call.result, `the result of ${call.where}`),
    where: call.where,
  };
}

/**
 * The smoke tool of a verified server (one meeting `where`, when given), called over its per-server
 * MCP endpoint (at 2025-11-25) and over REST.
 */
export async function provenSmokeCalls(
  context: DeploymentContext,
  where?: ServerCondition,
): Promise<{ server: ServableServer; mcp: ProvenCall; rest: ProvenCall }> {
  const smoke = await smokeCall(context, where);
  const { server, tool, args } = smoke;
  const connection = await McpConnection.open(context, perServer(server.view.id));
  const overMcp = await callKeepingMeta(connection, tool.name, args);
  const overRest = await callOverRest(context, server.view.id, tool.name, args);
  return { server, mcp: provenCall(smoke, overMcp), rest: provenCall(smoke, overRest) };
}

/** The smoke tool of a verified server, called over its per-server endpoint at MCP 2026-07-28. */
async function provenModernCall(
  context: DeploymentContext,
): Promise<{ server: ServableServer; mcp: ProvenCall }> {
  const smoke = await smokeCall(context);
  const connection = McpConnection.modern(context, perServer(smoke.server.view.id));
  return {
    server: smoke.server,
    mcp: provenCall(smoke, await callKeepingMeta(connection, smoke.tool.name, smoke.args)),
  };
}

/**
 * POST /api/verify, paid when the deployment charges for it (x402) and the tester lent a payer; a
 * charge without a payer makes the check not applicable.
 */
export async function postProof(context: DeploymentContext, body: Json): Promise<HttpResponse> {
  const { response } = await requestPaying(
    context,
    { service: 'gateway', method: 'POST', path: VERIFY, json: body },
    `POST ${VERIFY}`,
  );
  if (response.status === 402) {
    if (context.payer) notApplicableIfPaymentRequired({ response }, context);
    notApplicableBecause(`POST ${VERIFY} asks for an x402 payment (HTTP 402); ${PAYER_OPTIONS} to check it`);
  }
  return response;
}

const accepted = z.object({ valid: z.literal(true) }).loose();

async function expectAccepted(context: DeploymentContext, body: Json, what: string): Promise<void> {
  expectJson(await postProof(context, body), 200, accepted, `POST ${VERIFY} with ${what}`);
}

/** A refusal is a 4xx; a 2xx accepts, and a 5xx is a server error, not a verdict. */
const isRefusal = (status: number): boolean => status >= 400 && status < 500;

/** The request a proof commits to, as Sigil canonicalises it. */
export const canonicalRequest = (call: ProvenCall): Json => ({
  serverId: call.serverId,
  tool: call.tool,
  arguments: call.arguments,
});

/**
 * The response a proof commits to: the result without `_meta`, which carries the proof itself (and
 * without a top-level `proof`, where a REST answer may carry it instead), and without MCP 2026-07-28's
 * `resultType: "complete"`, the framing of every result of that revision.
 */
export function canonicalResponse(result: Json): Json {
  const {
    _meta: _ignored,
    proof: _proof,
    executionProof: _other,
    execution_proof: _another,
    ...rest
  } = result;
  if (rest.resultType === 'complete') delete rest.resultType;
  return rest;
}

/** SHA-256 (hex) of the RFC 8785 (JSON Canonicalization Scheme) form of `value`. */
export function rfc8785Sha256(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new Error('the value has no RFC 8785 form');
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

// ---- changing a proof, leaf by leaf ----

/** Every leaf of a proof (strings, numbers, booleans, null, and empty lists or objects), by path. */
export function leavesOf(value: unknown, at: string[] = []): Found[] {
  if (Array.isArray(value) && value.length > 0)
    return value.flatMap((item, index) => leavesOf(item, [...at, String(index)]));
  if (isObject(value) && Object.keys(value).length > 0)
    return Object.entries(value).flatMap(([key, inner]) => leavesOf(inner, [...at, key]));
  return [{ path: at, value }];
}

/** The same value changed as little as possible: one character, a flipped boolean, one more. */
export function changed(value: unknown): unknown {
  if (typeof value === 'string') return changedText(value);
  if (typeof value === 'number') return value + 1;
  if (typeof value === 'boolean') return !value;
  if (value === null) return 0;
  if (Array.isArray(value)) return ['SIGIL_CONFORMANCE'];
  return { sigilConformance: true };
}

function changedText(text: string): string {
  if (text === '') return 'x';
  const lastIndex = (pattern: RegExp) => {
    for (let index = text.length - 1; index >= 0; index--) if (pattern.test(text.charAt(index))) return index;
    return -1;
  };
  const digit = lastIndex(/[0-9]/);
  const letter = lastIndex(/[A-Za-z]/);
  const index = digit >= 0 ? digit : letter >= 0 ? letter : text.length - 1;
  const char = text.charAt(index);
  const replacement = /[0-9]/.test(char)
    ? String((Number(char) + 1) % 10)
    : /[a-z]/.test(char)
      ? char === 'a'
        ? 'b'
        : 'a'
      : /[A-Z]/.test(char)
        ? char === 'A'
          ? 'B'
          : 'A'
        : char === '-'
          ? '_'
          : '-';
  return `${text.slice(0, index)}${replacement}${text.slice(index + 1)}`;
}

function withLeaf(proof: Json, leaf: string[], value: unknown): Json {
  const copy = structuredClone(proof);
  let node: Record<string, unknown> = copy;
  for (const segment of leaf.slice(0, -1)) node = node[segment] as Record<string, unknown>;
  node[leaf[leaf.length - 1] as string] = value;
  return copy;
}

/**
 * The fields a refusal names: `fields`, `field`, `path`, … anywhere in the body (Sigil puts them in
 * `details.fields`; a schema error in `details.issues[].path`), without a `body.`/`proof.` prefix.
 */
export function namedFields(body: unknown): string[] {
  const names: string[] = [];
  const add = (value: unknown) => {
    if (typeof value === 'string') names.push(value);
    if (Array.isArray(value) && value.every((part) => typeof part === 'string' || typeof part === 'number'))
      names.push(value.join('.'));
  };
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (!isObject(node)) return;
    for (const [key, value] of Object.entries(node)) {
      if (['field', 'path', 'pointer', 'instancePath'].includes(key)) add(value);
      else if (key === 'fields' && Array.isArray(value)) value.forEach(add);
      else walk(value);
    }
  };
  walk(body);
  return names.map((name) =>
    name
      .replace(/^\//, '')
      .replace(/\//g, '.')
      .replace(/\[(\d+)\]/g, '.$1')
      .replace(/^(body\.)?(proof\.)?/, ''),
  );
}

/**
 * True when a refusal names the changed leaf: the leaf itself, a field that holds it (`server` for
 * `server.digest`), one it holds, or its own key (a per-field MAC of `tool` is about `tool`).
 */
export function namesLeaf(names: readonly string[], leaf: readonly string[]): boolean {
  const full = dotted(leaf);
  const key = [...leaf].reverse().find((segment) => !/^\d+$/.test(segment));
  return names.some(
    (name) => name === full || full.startsWith(`${name}.`) || name.startsWith(`${full}.`) || name === key,
  );
}

export interface TamperResult {
  leaf: string;
  status: number;
  /** The fields the refusal names. */
  named: string[];
  namesIt: boolean;
  excerpt: string;
}

/**
 * Shows the untouched proof is accepted (else a refusal proves nothing), then sends it once per leaf
 * with that leaf changed.
 */
export async function tamperEachLeaf(context: DeploymentContext): Promise<TamperResult[]> {
  const { mcp } = await provenSmokeCalls(context);
  await expectAccepted(context, { proof: mcp.proof }, `the untouched proof of ${mcp.where}`);
  const results: TamperResult[] = [];
  for (const leaf of leavesOf(mcp.proof)) {
    const response = await postProof(context, { proof: withLeaf(mcp.proof, leaf.path, changed(leaf.value)) });
    const named = namedFields(response.body);
    results.push({
      leaf: dotted(leaf.path),
      status: response.status,
      named,
      namesIt: namesLeaf(named, leaf.path),
      excerpt: excerpt(response.text.replace(/\s+/g, ' '), 160),
    });
  }
  context.evidence.note(`${results.length} leaves of the proof, each changed alone`, {
    results: results.map(({ leaf, status, named }) => ({ leaf, status, named })),
  });
  return results;
}

/** What the proof of `call` lacks of the spec's fields, or names otherwise than the server's details. */
function proofFieldProblems(server: ServableServer, call: ProvenCall): string[] {
  const problems: string[] = [];
  for (const [name, field] of Object.entries(PROOF_FIELDS) as [ProofFieldName, ProofField][]) {
    const found = findField(call.proof, name);
    if (found === undefined) {
      problems.push(`the proof of ${call.where} has no ${field.label}`);
      continue;
    }
    const problem = field.problem(found.value);
    if (problem !== undefined)
      problems.push(`${field.label} (${dotted(found.path)}) of the proof of ${call.where} ${problem}`);
  }
  // Where the server's details name its package and digest, the proof must name the same.
  for (const name of ['package', 'digest'] as const) {
    const shown = server.view.details[name];
    const found = findField(call.proof, name);
    if (typeof shown === 'string' && shown !== '' && found !== undefined && found.value !== shown) {
      problems.push(
        `${PROOF_FIELDS[name].label} of the proof of ${call.where} is ${JSON.stringify(found.value)}, but GET ${path.server(server.view.id)} shows ${JSON.stringify(shown)}`,
      );
    }
  }
  return problems;
}

/**
 * Where the request and response hashes of the proof of `call` are not the SHA-256 of the RFC 8785
 * forms; not applicable to a proof that names another canonicalisation.
 */
function hashProblems(call: ProvenCall): string[] {
  const scheme = Object.entries(call.proof).find(([key]) => /canonical/.test(normalized(key)))?.[1];
  if (typeof scheme === 'string' && !/8785|jcs/i.test(scheme)) {
    notApplicableBecause(
      `the proof names its canonicalisation ${JSON.stringify(scheme)}; this runner computes RFC 8785 (JCS) only`,
    );
  }
  const expected = {
    requestHash: rfc8785Sha256(canonicalRequest(call)),
    responseHash: rfc8785Sha256(canonicalResponse(call.result)),
  };
  const problems: string[] = [];
  for (const name of ['requestHash', 'responseHash'] as const) {
    const found = findField(call.proof, name);
    const actual = bytes32(found?.value)?.toString('hex');
    if (actual !== expected[name]) {
      problems.push(
        `${PROOF_FIELDS[name].label} in the proof of ${call.where} is ${JSON.stringify(found?.value)}, expected ${expected[name]} (${name === 'requestHash' ? `of ${excerpt(canonicalize(canonicalRequest(call)) ?? '', 200)}` : 'of the result without _meta'})`,
      );
    }
  }
  return problems;
}

/** POST /api/verify accepts the untouched proof of `call`, alone and with the request and response it covers. */
async function expectVerifies(context: DeploymentContext, call: ProvenCall): Promise<void> {
  await expectAccepted(context, { proof: call.proof }, `the proof of ${call.where}`);
  await expectAccepted(
    context,
    { proof: call.proof, request: canonicalRequest(call), response: call.result },
    `the proof of ${call.where} and the request and response it covers`,
  );
}

export const proofRequirements: readonly Requirement[] = [
  {
    id: 'GW-2.proof-fields',
    level: 'MUST',
    title:
      'A tool result, over MCP and over REST, carries an execution proof with the gateway code hash and git commit, server package and registry digest, request and response SHA-256, timestamp, TEE status, secret names and an HMAC-SHA256 signature',
    spec: `${SPEC_PROOF}; part 1: "returns the result with an execution proof"; part 6: "Each tool call returns an execution proof"`,
    service: 'gateway',
    check: async (context) => {
      const { server, mcp, rest } = await provenSmokeCalls(context);
      const problems = [mcp, rest].flatMap((call) => proofFieldProblems(server, call));
      ensure(problems.length === 0, problems.join('; '));
      context.evidence.note(
        'proof fields found',
        Object.fromEntries(
          Object.keys(PROOF_FIELDS).map((name) => [
            name,
            dotted(findField(mcp.proof, name as ProofFieldName)?.path ?? []),
          ]),
        ),
      );
      return pass();
    },
  },
  {
    id: 'GW-2.proof-request-response-hashes',
    level: 'MUST',
    title:
      'The proof’s request and response hashes are the SHA-256 of the RFC 8785 canonical request {serverId, tool, arguments} and of the result without _meta',
    spec: `${SPEC_PROOF}. The spec does not fix the canonical form; a proof that names one other than RFC 8785 (JCS) is not applicable`,
    service: 'gateway',
    check: async (context) => {
      const { mcp, rest } = await provenSmokeCalls(context);
      const problems = [mcp, rest].flatMap(hashProblems);
      ensure(problems.length === 0, problems.join('; '));
      return pass();
    },
  },
  {
    id: 'GW-4.verify-accepts',
    level: 'MUST',
    title: 'POST /api/verify accepts an untouched proof, alone and with the request and response it covers',
    spec: SPEC_VERIFY,
    service: 'gateway',
    check: async (context) => {
      const { mcp, rest } = await provenSmokeCalls(context);
      for (const call of [mcp, rest]) await expectVerifies(context, call);
      return pass();
    },
  },
  {
    id: 'GW-4.verify-mismatch',
    level: 'MUST',
    title:
      'POST /api/verify refuses an untouched proof given with a request or a response other than those it covers',
    spec: SPEC_VERIFY,
    service: 'gateway',
    check: async (context) => {
      const { mcp } = await provenSmokeCalls(context);
      const request = canonicalRequest(mcp);
      await expectAccepted(
        context,
        { proof: mcp.proof, request, response: mcp.result },
        'the proof and the request and response it covers',
      );
      const others: [string, Json][] = [
        [
          'another request (one argument more)',
          { request: { ...request, arguments: { ...mcp.arguments, sigilConformance: 'another call' } } },
        ],
        [
          'another response',
          {
            response: { content: [{ type: 'text', text: 'not what the tool answered (sigil conformance)' }] },
          },
        ],
      ];
      for (const [what, given] of others) {
        const response = await postProof(context, { proof: mcp.proof, ...given });
        ensure(
          isRefusal(response.status),
          `POST ${VERIFY} with the proof and ${what}: expected a refusal (HTTP 4xx), got ${response.status}: ${excerpt(response.text, 200)}`,
        );
        context.evidence.note(`${what}: refused with HTTP ${response.status}`, {
          named: namedFields(response.body),
        });
      }
      return pass();
    },
  },
  {
    id: 'GW-4.verify-tamper',
    level: 'MUST',
    title: 'POST /api/verify refuses a proof with any single field changed (each leaf tried alone)',
    spec: `${SPEC_VERIFY}; a proof is signed with HMAC-SHA256, so no field can change unnoticed`,
    service: 'gateway',
    check: async (context) => {
      const results = await tamperEachLeaf(context);
      const accepted = results.filter((result) => result.status >= 200 && result.status < 300);
      ensure(
        accepted.length === 0,
        `POST ${VERIFY} accepted the proof with ${accepted.map((result) => result.leaf).join(', ')} changed`,
      );
      const unclear = results.filter((result) => !isRefusal(result.status));
      ensure(
        unclear.length === 0,
        `POST ${VERIFY} answered a changed proof with neither an acceptance nor a refusal (HTTP 4xx): ${unclear.map((result) => `${result.leaf} → HTTP ${result.status} ${result.excerpt}`).join('; ')}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-4.verify-tamper-names-field',
    level: 'SHOULD',
    title: 'A refusal of a changed proof names the changed field',
    spec: `${SPEC_VERIFY}; the spec does not say what a refusal reads like, but one that names the field tells the caller what was changed`,
    service: 'gateway',
    check: async (context) => {
      const results = (await tamperEachLeaf(context)).filter((result) => isRefusal(result.status));
      const unnamed = results.filter((result) => !result.namesIt);
      ensure(
        unnamed.length === 0,
        `refusals that do not name the changed field: ${unnamed.map((result) => `${result.leaf} (named ${result.named.join(', ') || 'nothing'}: ${result.excerpt})`).join('; ')}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-2.proof-mcp-2026',
    level: 'MUST',
    title: `A tool result at MCP ${MODERN_PROTOCOL_VERSION} carries an execution proof as at 2025-11-25: every field, request and response hashes of the RFC 8785 forms (the response without resultType), and POST /api/verify accepts it alone and with the request and response as delivered`,
    spec: `${SPEC_VERIFY}; part 1: "returns the result with an execution proof"; MCP ${MODERN_PROTOCOL_VERSION} (the gateway serves the same proofs on both revisions; resultType "complete" frames every result of that revision)`,
    service: 'gateway',
    features: ['mcp-2026'],
    check: async (context) => {
      const { server, mcp } = await provenModernCall(context);
      const problems = [...proofFieldProblems(server, mcp), ...hashProblems(mcp)];
      ensure(problems.length === 0, problems.join('; '));
      await expectVerifies(context, mcp);
      return pass();
    },
  },
];
