import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import type { JsonRpcErrorObject } from '../../../core/http/mcp-errors.ts';
import { ENVELOPE, isModernVersion, MODERN_REVISION } from '../../../core/mcp/era.ts';
import { ErrorCode, isPlainObject, type RequestId } from './jsonrpc.ts';

/**
 * MCP protocol revisions, told apart per request (MCP 2026-07-28, "Protocol versioning"): a request
 * whose `params._meta` names a protocol version claims the modern era and carries its client's
 * capabilities with it; any other request is 2025-11-25 (or older) traffic, served as it always was.
 * The `MCP-Protocol-Version` header only cross-checks what the body says. Pure: no zod, no I/O; it
 * never throws, and every refusal is a JSON-RPC error with a 4xx status.
 */

/** The modern revisions served: those `server/discover` lists, and the only ones a `_meta` claim may name. */
export const MODERN_VERSIONS: readonly string[] = [MODERN_REVISION];
/** The older revisions served, negotiated with `initialize` (the SDK 1.x list, as before). */
export const LEGACY_VERSIONS: readonly string[] = SUPPORTED_PROTOCOL_VERSIONS;
/** The revision of a request that names none at all: the spec lets a server assume 2025-03-26. */
export const DEFAULT_LEGACY_VERSION = '2025-03-26';
/** The modern methods served; any other is 404 / -32601 on the modern era (`initialize`, `ping` among them). */
export const MODERN_METHODS: readonly string[] = ['server/discover', 'tools/list', 'tools/call'];

/** Codes the spec defines in its reserved range (-32020…-32099); nothing else may be emitted there. */
export const HEADER_MISMATCH = -32020;
export const UNSUPPORTED_PROTOCOL_VERSION = -32022;

/** MCP log levels, least severe first (RFC 5424 order). */
export const LOG_LEVELS = [
  'debug',
  'info',
  'notice',
  'warning',
  'error',
  'critical',
  'alert',
  'emergency',
] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Which revision a request is served at. */
export type Revision =
  | {
      era: 'legacy';
      /** The header's version, or DEFAULT_LEGACY_VERSION when there is none. */
      version: string;
    }
  | {
      era: 'modern';
      version: string;
      clientCapabilities: Record<string, unknown>;
      clientInfo?: { name: string; version: string };
      /** Without it, the request gets no log messages (`notifications/message`). */
      logLevel?: LogLevel;
    };

/** A request refused before it is served: the HTTP status and the JSON-RPC error. */
export interface RevisionRejection {
  reject: { status: 400 | 404; error: JsonRpcErrorObject };
}

export type RevisionVerdict = Revision | RevisionRejection;

/** What classification reads of a POST: the three standard headers ('' when absent) and its message. */
export interface RevisionInput {
  /** `MCP-Protocol-Version` */
  headerVersion: string;
  /** `Mcp-Method` */
  mcpMethod: string;
  /** `Mcp-Name` (`=?base64?…?=` when not plain ASCII) */
  mcpName: string;
  message: { method: string; params?: unknown; id?: RequestId };
}

/** The legacy revision of a request with no header, shared (every 2025 call classifies to one of these). */
const LEGACY_BY_VERSION = new Map<string, Revision>(
  [...LEGACY_VERSIONS, DEFAULT_LEGACY_VERSION].map((version) => [version, { era: 'legacy', version }]),
);

/**
 * The revision `input` is served at, or its refusal; the first rung that fails answers (the order of
 * the SDK's `classifyInboundRequest` and of its HTTP entry):
 *
 * 1. `initialize` without a valid modern claim is the legacy handshake; with a modern header, -32020.
 * 2. A `_meta` claim: a malformed envelope is -32602 naming the key; a header that disagrees with the
 *    claim, or `Mcp-Method` with the method, -32020.
 * 3. No claim, but a modern header: -32602 (the envelope is missing). No claim and a header naming no
 *    revision served: -32022. Otherwise legacy.
 * 4. A claim naming a revision not served (2025-11-25 inside `_meta` included): -32022.
 * 5. A modern request without `MCP-Protocol-Version`, `Mcp-Method`, or (tools/call) `Mcp-Name`, or
 *    whose `Mcp-Name` is not the tool's name: -32020.
 * 6. A modern method not served: 404 / -32601.
 *
 * Notifications carry no requirement of headers; a malformed claim or a disagreeing header is still
 * refused. All refusals are HTTP 400 but the last (404).
 */
export function classifyRevision(input: RevisionInput, kind: 'request' | 'notification'): RevisionVerdict {
  const { headerVersion, mcpMethod, message } = input;
  const { method, params } = message;
  const meta = isPlainObject(params) && isPlainObject(params._meta) ? params._meta : undefined;
  const claimed = meta !== undefined && ENVELOPE.protocolVersion in meta;
  const headerModern = headerVersion !== '' && isModernVersion(headerVersion);

  if (kind === 'request' && method === 'initialize' && !(claimed && validModernClaim(meta))) {
    if (headerModern) {
      return mismatch(
        headerVersion,
        `an initialize request (the 2025-11-25 handshake) was sent with MCP-Protocol-Version ${headerVersion}; 2026-07-28 clients send server/discover instead`,
      );
    }
    return legacy(headerVersion);
  }
  if (!claimed) {
    if (headerModern) {
      if (kind === 'notification')
        return checkMethodHeader(mcpMethod, method) ?? modernNotification(headerVersion);
      const missing =
        meta === undefined
          ? ['_meta']
          : [ENVELOPE.protocolVersion, ENVELOPE.clientCapabilities].filter((k) => !(k in meta));
      return invalidParams(
        `Invalid params: the MCP-Protocol-Version header names ${headerVersion}, but the request has no per-request envelope: expected ${missing.map(metaKeyName).join(' and ')}`,
        { envelope: { missing } },
      );
    }
    if (headerVersion !== '' && !LEGACY_VERSIONS.includes(headerVersion)) {
      return unsupported(
        headerVersion,
        `Unsupported protocol version ${headerVersion}: this server speaks ${MODERN_VERSIONS.join(', ')} (per request, in params._meta) and ${LEGACY_VERSIONS.join(', ')} (after initialize)`,
      );
    }
    return legacy(headerVersion);
  }
  const issue = envelopeIssue(meta, kind);
  if (issue) {
    return invalidParams(`Invalid _meta envelope for MCP ${MODERN_REVISION}: expected ${issue.expected}`, {
      envelope: { key: issue.key, problem: issue.problem },
    });
  }
  const version = meta[ENVELOPE.protocolVersion] as string;
  if (headerVersion !== '' && headerVersion !== version) {
    return mismatch(
      headerVersion,
      `the body's _meta names protocol version ${version} but the MCP-Protocol-Version header names ${headerVersion}`,
    );
  }
  const methodMismatch = checkMethodHeader(mcpMethod, method);
  if (methodMismatch) return methodMismatch;
  if (!MODERN_VERSIONS.includes(version)) {
    return unsupported(
      version,
      isModernVersion(version)
        ? `Unsupported protocol version ${version}: expected _meta["${ENVELOPE.protocolVersion}"] to be one of ${MODERN_VERSIONS.join(', ')}`
        : `Unsupported protocol version ${version} in _meta: only ${MODERN_VERSIONS.join(', ')} is named per request; ${version} is negotiated with initialize and no _meta envelope (mixed revisions)`,
    );
  }
  if (kind === 'notification') return modernNotification(version);
  const headers = checkStandardHeaders(input, version);
  if (headers) return headers;
  if (!MODERN_METHODS.includes(method)) {
    return {
      reject: {
        status: 404,
        error: {
          code: ErrorCode.MethodNotFound,
          message: `Method not found: ${method} is not served at MCP ${version} (served: ${MODERN_METHODS.join(', ')})`,
        },
      },
    };
  }
  const clientInfo = meta[ENVELOPE.clientInfo] as { name: string; version: string } | undefined;
  const logLevel = meta[ENVELOPE.logLevel] as LogLevel | undefined;
  return {
    era: 'modern',
    version,
    clientCapabilities: meta[ENVELOPE.clientCapabilities] as Record<string, unknown>,
    ...(clientInfo && { clientInfo }),
    ...(logLevel && { logLevel }),
  };
}

export const isRejection = (verdict: RevisionVerdict): verdict is RevisionRejection => 'reject' in verdict;

function legacy(headerVersion: string): Revision {
  const version = headerVersion === '' ? DEFAULT_LEGACY_VERSION : headerVersion;
  return LEGACY_BY_VERSION.get(version) ?? { era: 'legacy', version };
}

const modernNotification = (version: string): Revision => ({
  era: 'modern',
  version,
  clientCapabilities: {},
});

const metaKeyName = (key: string): string => (key === '_meta' ? 'params._meta' : `_meta["${key}"]`);

function validModernClaim(meta: Record<string, unknown>): boolean {
  const version = meta[ENVELOPE.protocolVersion];
  return (
    typeof version === 'string' && isModernVersion(version) && envelopeIssue(meta, 'request') === undefined
  );
}

interface EnvelopeIssue {
  key: string;
  problem: string;
  /** What was expected, for the message ("_meta[…] (an object); it is missing"). */
  expected: string;
}

const CAPABILITY_MEMBERS = ['experimental', 'sampling', 'elicitation', 'roots', 'extensions'];

/**
 * `key` of an envelope is not `what` it must be. Not a closure in envelopeIssue: under tsx (esbuild's
 * keepNames) each closure made per call costs a defineProperty, and every modern request is checked.
 */
const issue = (key: string, what: string, problem: string): EnvelopeIssue => ({
  key,
  problem,
  expected: `${metaKeyName(key)} to be ${what}; ${problem === 'missing' ? 'it is missing' : `it is ${problem}`}`,
});

/**
 * The first problem of a claimed envelope, or undefined when it is well-formed: the required keys
 * first (a notification needs only the version), then the optional ones' types.
 */
function envelopeIssue(
  meta: Record<string, unknown>,
  kind: 'request' | 'notification',
): EnvelopeIssue | undefined {
  const version = meta[ENVELOPE.protocolVersion];
  if (typeof version !== 'string' || version === '')
    return issue(ENVELOPE.protocolVersion, 'a protocol version string such as 2026-07-28', describe(version));
  if (kind === 'notification') return undefined;
  if (!(ENVELOPE.clientCapabilities in meta))
    return issue(ENVELOPE.clientCapabilities, 'an object', 'missing');
  const capabilities = meta[ENVELOPE.clientCapabilities];
  if (!isPlainObject(capabilities))
    return issue(ENVELOPE.clientCapabilities, 'an object', describe(capabilities));
  for (const member of CAPABILITY_MEMBERS) {
    if (member in capabilities && !isPlainObject(capabilities[member]))
      return issue(`${ENVELOPE.clientCapabilities}.${member}`, 'an object', describe(capabilities[member]));
  }
  if (ENVELOPE.clientInfo in meta) {
    const info = meta[ENVELOPE.clientInfo];
    if (!isPlainObject(info) || typeof info.name !== 'string' || typeof info.version !== 'string')
      return issue(ENVELOPE.clientInfo, '{ name, version } (strings)', describe(info));
  }
  if (ENVELOPE.logLevel in meta && !(LOG_LEVELS as readonly unknown[]).includes(meta[ENVELOPE.logLevel]))
    return issue(ENVELOPE.logLevel, `one of ${LOG_LEVELS.join(', ')}`, describe(meta[ENVELOPE.logLevel]));
  if ('progressToken' in meta) {
    const token = meta.progressToken;
    if (typeof token !== 'string' && !Number.isSafeInteger(token))
      return issue('progressToken', 'a string or an integer', describe(token));
  }
  return undefined;
}

function describe(value: unknown): string {
  if (value === undefined) return 'missing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return value === '' ? 'an empty string' : 'a string';
  return `a ${typeof value}`;
}

/** The methods whose `Mcp-Name` header mirrors a member of the params (SEP-2243), of those served. */
const NAME_SOURCE: Readonly<Record<string, string>> = { 'tools/call': 'name' };

function checkMethodHeader(mcpMethod: string, method: string): RevisionRejection | undefined {
  if (mcpMethod === '' || mcpMethod === method) return undefined;
  return mismatch(mcpMethod, `the body names method ${method} but the Mcp-Method header names ${mcpMethod}`);
}

/** SEP-2243: every modern request names its version and method in headers, and tools/call its tool. */
function checkStandardHeaders(input: RevisionInput, version: string): RevisionRejection | undefined {
  const { headerVersion, mcpMethod, mcpName, message } = input;
  if (headerVersion === '')
    return mismatch(
      '(missing)',
      `the body's _meta names protocol version ${version} but the required MCP-Protocol-Version header is absent`,
    );
  if (mcpMethod === '')
    return mismatch(
      '(missing)',
      `the body names method ${message.method} but the required Mcp-Method header is absent`,
    );
  const field = Object.hasOwn(NAME_SOURCE, message.method) ? NAME_SOURCE[message.method] : undefined;
  if (field === undefined) return undefined;
  const raw = isPlainObject(message.params) ? message.params[field] : undefined;
  const value = typeof raw === 'string' ? raw : undefined;
  if (mcpName === '') {
    if (value === undefined) return undefined; // the params' own check refuses it (-32602)
    return mismatch(
      '(missing)',
      `the body carries params.${field}="${value}" but the required Mcp-Name header is absent`,
    );
  }
  const decoded = decodeHeaderValue(mcpName);
  if (decoded === undefined)
    return mismatch(mcpName, 'the Mcp-Name header carries an invalid =?base64?…?= value');
  if (value !== undefined && decoded !== value)
    return mismatch(
      mcpName,
      `the body carries params.${field}="${value}" but the Mcp-Name header names "${decoded}"`,
    );
  return undefined;
}

const BASE64_PREFIX = '=?base64?';
const BASE64_SUFFIX = '?=';
const CANONICAL_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/** A header value as SEP-2243 encodes it: plain, or `=?base64?<UTF-8 in base64>?=`; undefined when malformed. */
export function decodeHeaderValue(value: string): string | undefined {
  if (!(value.startsWith(BASE64_PREFIX) && value.endsWith(BASE64_SUFFIX))) return value;
  const encoded = value.slice(BASE64_PREFIX.length, value.length - BASE64_SUFFIX.length);
  if (!CANONICAL_BASE64.test(encoded)) return undefined;
  try {
    return STRICT_UTF8.decode(Buffer.from(encoded, 'base64'));
  } catch {
    return undefined;
  }
}

const mismatch = (header: string, body: string): RevisionRejection => ({
  reject: {
    status: 400,
    error: {
      code: HEADER_MISMATCH,
      message: `Bad Request: the request headers and body disagree: ${body}`,
      data: { mismatch: { header, body } },
    },
  },
});

const invalidParams = (message: string, data: unknown): RevisionRejection => ({
  reject: { status: 400, error: { code: ErrorCode.InvalidParams, message, data } },
});

const unsupported = (requested: string, message: string): RevisionRejection => ({
  reject: {
    status: 400,
    error: {
      code: UNSUPPORTED_PROTOCOL_VERSION,
      message,
      data: { supported: [...MODERN_VERSIONS], requested },
    },
  },
});
