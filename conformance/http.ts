import { request as nodeRequest } from 'node:http';
import { request as nodeRequestTls } from 'node:https';
import {
  excerpt,
  failWith,
  isSecretName,
  type EvidenceLog,
  type EvidenceRedactor,
  type HttpEvidence,
} from '@sigil/plugin-api/kit';

/** The two services under test. */
export type ServiceName = 'runtime' | 'gateway';

export interface HttpRequest {
  service: ServiceName;
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'OPTIONS';
  /** Path and query, e.g. `/api/auth/challenge?address=0x…`. */
  path: string;
  headers?: Record<string, string>;
  /** Sent as JSON with `Content-Type: application/json`. */
  json?: unknown;
  /** Sent as is, with `Content-Type: application/json` (malformed JSON, say); ignored when `json` is given. */
  rawJson?: string;
  /** Overrides the client's timeout for this request (a gateway installing a server on demand). */
  timeoutMs?: number;
  /** A `Host` other than the URL's (a DNS-rebinding page's name), which fetch cannot send. */
  host?: string;
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
  'access-control-allow-origin',
  'access-control-allow-methods',
  'access-control-allow-headers',
  'access-control-expose-headers',
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
    private readonly redactor: EvidenceRedactor,
    private readonly evidence: EvidenceLog | undefined,
    private readonly timeoutMs = 10_000,
  ) {}

  /** The absolute URL of a path on a service (ERC-8128 signs exactly this URL). */
  url(service: ServiceName, path: string): string {
    return new URL(path, this.baseUrls[service]).toString();
  }

  request(request: HttpRequest): Promise<HttpResponse> {
    return this.exchange(request, (response) => response.text());
  }

  /**
   * A request whose answer is a stream (Server-Sent Events): its body is read until `enough` holds of
   * what came so far, or until it ends, so a stream that stays open (a run waiting for an approval)
   * is left once it said what the check waits for.
   */
  stream(request: HttpRequest, enough: (text: string) => boolean): Promise<HttpResponse> {
    return this.exchange(request, async (response) => {
      if (!response.body) return '';
      const decoder = new TextDecoder();
      const reader = response.body.getReader();
      let text = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return text + decoder.decode();
        text += decoder.decode(value, { stream: true });
        if (enough(text)) {
          await reader.cancel();
          return text;
        }
      }
    });
  }

  private async exchange(
    request: HttpRequest,
    readBody: (response: Response) => Promise<string>,
  ): Promise<HttpResponse> {
    const method = request.method ?? 'GET';
    const url = this.url(request.service, request.path);
    const headers: Record<string, string> = {
      accept: 'application/json',
      ...request.headers,
      ...(request.host === undefined ? {} : { host: request.host }),
    };
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
    const signal = AbortSignal.timeout(request.timeoutMs ?? this.timeoutMs);
    try {
      const response =
        request.host === undefined
          ? await fetch(url, {
              method,
              headers,
              ...(body === undefined ? {} : { body }),
              redirect: 'manual',
              signal,
            })
          : await withHost(url, method, headers, body, signal);
      const text = await readBody(response);
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

/** One request over node:http(s), which sends the `host` header given, answered as fetch answers. */
function withHost(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | undefined,
  signal: AbortSignal,
): Promise<Response> {
  const send = url.startsWith('https:') ? nodeRequestTls : nodeRequest;
  return new Promise((resolve, reject) => {
    const length = body === undefined ? {} : { 'content-length': String(Buffer.byteLength(body)) };
    const req = send(url, { method, headers: { ...headers, ...length }, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        const answered = new Headers();
        for (const [name, value] of Object.entries(res.headers))
          for (const one of Array.isArray(value) ? value : [value])
            if (one !== undefined) answered.append(name, one);
        const status = res.statusCode ?? 0;
        const nullBody = status === 204 || status === 304 || status < 200;
        resolve(new Response(nullBody ? null : Buffer.concat(chunks), { status, headers: answered }));
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}
