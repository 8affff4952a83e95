import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { anthropicWire } from './anthropic-wire.ts';
import { FAILING_MODEL, LOCAL_MODELS, RATE_LIMITED_MODEL, SLOW_MODEL } from './catalog.ts';
import { openAiWire } from './openai-wire.ts';
import { sendJson, type Exchange, type Wire } from './wire.ts';

/**
 * A local, deterministic stand-in for an LLM API: no model, no network beyond its own listener. It
 * speaks the OpenAI Chat Completions wire format (`POST /v1/chat/completions`) and Anthropic's
 * Messages format (`POST /v1/messages`), streaming (SSE) or not, with tool calls, plus
 * `GET /v1/models` in either format (Anthropic's when the request has `anthropic-version`). What it
 * answers is in model.ts; which keys it takes and which models fail on purpose, below and in
 * catalog.ts.
 */

export interface StandInOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: a port the OS picks. */
  port?: number;
  /**
   * Keys it accepts (`Authorization: Bearer <key>` or `x-api-key: <key>`). Absent: any non-empty key
   * that does not start with `invalid`. Any other key is a 401.
   */
  apiKeys?: readonly string[];
  /** Pause before each streamed event of `sigil-slow`; default 50 ms. */
  slowDelayMs?: number;
}

export interface StandInStats {
  /** Chat requests (both formats) being answered now: a cancelled stream leaves this count. */
  open: number;
  /** Chat requests answered to the end. */
  served: number;
  /** Chat requests whose client went away before the answer ended. */
  cancelled: number;
}

export interface StandIn {
  /** `http://host:port`, without a path: OpenAI clients take `${url}/v1`, Anthropic's `url`. */
  url: string;
  host: string;
  port: number;
  stats(): StandInStats;
  /** Stops listening and cuts every open connection (streams in progress included). */
  close(): Promise<void>;
}

const BODY_LIMIT = 4 * 1024 * 1024;
const KNOWN_MODELS = new Set(LOCAL_MODELS.map((model) => model.id));

/** The key a request carries: `x-api-key`, or a bearer token. */
function keyOf(req: IncomingMessage): string {
  const header = req.headers['x-api-key'];
  if (typeof header === 'string' && header !== '') return header;
  const auth = req.headers.authorization ?? '';
  return /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim() ?? '';
}

async function readBody(req: IncomingMessage): Promise<Buffer | 'too_large'> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > BODY_LIMIT) return 'too_large';
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Starts a stand-in (see `StandInOptions`); resolves once it listens. */
export async function startStandIn(options: StandInOptions = {}): Promise<StandIn> {
  const host = options.host ?? '127.0.0.1';
  const slowDelayMs = options.slowDelayMs ?? 50;
  const accepted = options.apiKeys === undefined ? undefined : new Set(options.apiKeys);
  const stats: StandInStats = { open: 0, served: 0, cancelled: 0 };
  let serial = 0;

  const keyAccepted = (key: string) =>
    key !== '' && (accepted ? accepted.has(key) : !key.startsWith('invalid'));

  /** A 401 that quotes the key, as some real APIs do (partly): a provider must keep it out of its errors. */
  const refuse = (wire: Wire, res: ServerResponse, key: string) =>
    wire.fail(
      res,
      'auth',
      key === ''
        ? 'No API key provided: send Authorization: Bearer <key> or x-api-key: <key>.'
        : `Incorrect API key provided: ${key}.`,
    );

  async function chat(wire: Wire, req: IncomingMessage, res: ServerResponse): Promise<void> {
    stats.open++;
    const closed = new AbortController();
    res.once('close', () => {
      stats.open--;
      if (res.writableFinished) stats.served++;
      else stats.cancelled++;
      closed.abort();
    });
    const key = keyOf(req);
    if (!keyAccepted(key)) {
      req.resume();
      return refuse(wire, res, key);
    }
    const raw = await readBody(req);
    if (raw === 'too_large') return wire.fail(res, 'too_large', `request body over ${BODY_LIMIT} bytes`);
    let body: unknown;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch {
      return wire.fail(res, 'invalid', 'the request body is not valid JSON');
    }
    const exchange: Exchange = {
      res,
      body,
      closed: closed.signal,
      serial: ++serial,
      admitModel: (model) => {
        if (model === RATE_LIMITED_MODEL) {
          wire.fail(
            res,
            'rate_limit',
            `Rate limit reached for ${model} (the stand-in's rate-limited model).`,
            {
              'retry-after': '1',
            },
          );
          return false;
        }
        if (model === FAILING_MODEL) {
          wire.fail(res, 'server', `${model} failed (the stand-in's failing model).`);
          return false;
        }
        if (!KNOWN_MODELS.has(model)) {
          wire.fail(res, 'not_found', `The model '${model}' does not exist.`);
          return false;
        }
        return true;
      },
      stream: async (model, frames) => {
        res.writeHead(200, {
          'content-type': 'text/event-stream; charset=utf-8',
          'cache-control': 'no-cache',
          connection: 'keep-alive',
        });
        const pace = model === SLOW_MODEL ? slowDelayMs : 0;
        for (const [index, frame] of frames.entries()) {
          if (closed.signal.aborted) return;
          if (pace > 0 && index > 0) {
            try {
              await sleep(pace, undefined, { signal: closed.signal });
            } catch {
              return;
            }
          }
          res.write(frame);
        }
        res.end();
      },
      json: (status, value, headers) => sendJson(res, status, value, headers),
    };
    await wire.handle(exchange);
  }

  const wires = [openAiWire, anthropicWire];
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const isAnthropic = req.headers['anthropic-version'] !== undefined;
    const wireOfRequest = isAnthropic ? anthropicWire : openAiWire;
    const respond = async () => {
      const chatWire = req.method === 'POST' ? wires.find((wire) => wire.chatPath === path) : undefined;
      if (chatWire) return chat(chatWire, req, res);
      if (req.method === 'GET' && path === '/health') return sendJson(res, 200, { status: 'ok' });
      if (req.method === 'GET' && (path === '/v1/models' || path.startsWith('/v1/models/'))) {
        const key = keyOf(req);
        if (!keyAccepted(key)) return refuse(wireOfRequest, res, key);
        const list = wireOfRequest.models() as { data: { id: string }[] };
        if (path === '/v1/models') return sendJson(res, 200, list);
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        const model = list.data.find((entry) => entry.id === id);
        if (model) return sendJson(res, 200, model);
        return wireOfRequest.fail(res, 'not_found', `The model '${id}' does not exist.`);
      }
      req.resume();
      wireOfRequest.fail(res, 'not_found', `No route ${req.method ?? ''} ${path}`);
    };
    respond().catch(() => {
      if (!res.headersSent)
        sendJson(res, 500, { error: { message: 'stand-in failure', type: 'server_error' } });
      else res.destroy();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${urlHost}:${port}`,
    host,
    port,
    stats: () => ({ ...stats }),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
