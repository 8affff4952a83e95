import { failWith } from './check.ts';
import { excerpt, type EvidenceLog, type HttpEvidence } from './evidence.ts';
import { isSecretName, type Redactor } from './redact.ts';

/** The two services under test. */
export type ServiceName = 'runtime' | 'gateway';

export interface HttpRequest {
  service: ServiceName;
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** Path and query, e.g. `/api/auth/challenge?address=0x…`. */
  path: string;
  headers?: Record<string, string>;
  /** Sent as JSON with `Content-Type: application/json`. */
  json?: unknown;
  /** Sent as is, with `Content-Type: application/json` (malformed JSON, say); ignored when `json` is given. */
  rawJson?: string;
  /** Overrides the client's timeout for this request (a gateway installing a server on demand). */
  timeoutMs?: number;
}

export interface HttpResponse {
  status: number;
  headers: Headers;
  text: string;
  /** The parsed body when it is JSON, otherwise undefined. */
  body: unknown;
}

/** Response headers worth keeping as evidence; the rest is noise (dates, connection handling). */
const EVIDENCE_RESPONSE_HEADERS = [
  'content-type',
  'www-authenticate',
  'location',
  'allow',
  'mcp-session-id',
  'x-request-id',
  // x402: the terms asked (public) and the settlement receipt (a transaction hash).
  'payment-required',
  'payment-response',
];

/**
 * HTTP against the deployment's two base URLs, recording every exchange as evidence. Network failures
 * end the check as a failure that names the service, since a check cannot judge what it cannot reach.
 */
export class HttpClient {
  constructor(
    private readonly baseUrls: Readonly<Record<ServiceName, string>>,
    private readonly redactor: Redactor,
    private readonly evidence: EvidenceLog | undefined,
    private readonly timeoutMs = 10_000,
  ) {}

  /** The absolute URL of a path on a service (ERC-8128 signs exactly this URL). */
  url(service: ServiceName, path: string): string {
    return new URL(path, this.baseUrls[service]).toString();
  }

  async request(request: HttpRequest): Promise<HttpResponse> {
    const method = request.method ?? 'GET';
    const url = this.url(request.service, request.path);
    const headers: Record<string, string> = { accept: 'application/json', ...request.headers };
    const body = request.json === undefined ? request.rawJson : JSON.stringify(request.json);
    if (body !== undefined) headers['content-type'] = 'application/json';
    // Whatever credential a check sends is a secret from now on, wherever it shows up again.
    for (const [name, value] of Object.entries(headers))
      if (isSecretName(name)) this.redactor.remember(value);
    const exchange: HttpEvidence = {
      kind: 'http',
      request: { method, url, headers, ...(body === undefined ? {} : { body: excerpt(body) }) },
      durationMs: 0,
    };
    const started = performance.now();
    try {
      const response = await fetch(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        redirect: 'manual',
        signal: AbortSignal.timeout(request.timeoutMs ?? this.timeoutMs),
      });
      const text = await response.text();
      const parsed = parseJson(text);
      this.rememberSecretFields(parsed);
      exchange.response = {
        status: response.status,
        headers: Object.fromEntries(
          EVIDENCE_RESPONSE_HEADERS.flatMap((name) => {
            const value = response.headers.get(name);
            return value === null ? [] : [[name, value]];
          }),
        ),
        ...(text === '' ? {} : { body: excerpt(text) }),
      };
      return { status: response.status, headers: response.headers, text, body: parsed };
    } catch (err) {
      exchange.error = describeNetworkError(err);
      return failWith(`cannot reach the ${request.service} at ${url}: ${exchange.error}`);
    } finally {
      exchange.durationMs = Math.round(performance.now() - started);
      this.evidence?.http(exchange);
    }
  }

  /** Opaque tokens of other implementations have no recognisable shape; their field names give them away. */
  private rememberSecretFields(value: unknown): void {
    if (typeof value !== 'object' || value === null) return;
    for (const [key, inner] of Object.entries(value)) {
      if (isSecretName(key) && typeof inner === 'string') this.redactor.remember(inner);
      else this.rememberSecretFields(inner);
    }
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function describeNetworkError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  if (err.name === 'TimeoutError') return 'timed out';
  const cause = (err as Error & { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? err.message;
}
