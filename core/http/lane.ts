import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../log.ts';
import { disconnection, type Disconnection } from './disconnect.ts';
import type { EdgePolicy } from './edge.ts';
import { errorAnswer, type AuthChallenge } from './errors.ts';
import { incomingOf, pathOf, type IncomingRequest } from './incoming.ts';
import type { HttpMetrics } from './metrics.ts';
import type { TrustedProxies } from './trusted-proxies.ts';
import type { LogFields, RequestLogging } from './request-context.ts';

/**
 * What a lane's steps leave for the handler; modules add members by declaration merging, as with Koa's
 * `DefaultState` (authentication adds `auth` and `authError`).
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- filled by declaration merging
export interface LaneState {}

/** One request on a lane, and what its answer carries besides the body. */
export interface LaneExchange {
  readonly request: IncomingRequest;
  readonly requestId: string;
  /** The route's named parameters, URL-decoded. */
  readonly params: Readonly<Record<string, string>>;
  readonly state: LaneState;
  /** Fields for the request's log lines and its access line (e.g. the auth method). */
  logFields: LogFields;
  /** The request's logger, bound to its id and log fields. */
  readonly log: Logger;
  /** Tells work for this request that the client went away before the answer was complete. */
  disconnection(): Disconnection;
  setHeader(name: string, value: string): void;
  /**
   * Starts the answer now (status 200, the headers set so far and these), for a body sent in parts
   * (Server-Sent Events); the handler's answer is then its last part, and its status is not sent.
   */
  openStream(headers: Record<string, string>): LaneStream;
}

/** An answer being sent in parts. */
export interface LaneStream {
  write(chunk: string): void;
  /** True while the client reads slower than it is written to (what is written waits in memory). */
  readonly congested: boolean;
}

/** A JSON answer (`body` already serialized), or an empty one (`body: null`). */
export interface LaneAnswer {
  status: number;
  body: string | null;
}

/** Runs before the handler, in order (e.g. authentication); throwing answers with the error. */
export type LaneStep = (exchange: LaneExchange) => Promise<void>;

export interface LaneRoute {
  method: string;
  /** A path template with named parameters (`/mcp/server/:serverId`); metrics label requests by it. */
  path: string;
  handle(exchange: LaneExchange): Promise<LaneAnswer>;
}

/**
 * Routes served without Koa: the same request id, access line, metrics and error shape as the app's
 * chain, then the lane's steps and the route's handler, each request answered with one write. For a
 * service's busiest endpoint: on a gateway busy with tool calls, Koa's context, router and middleware
 * chain were about a fifth of the CPU per call.
 */
export interface Lane {
  steps: readonly LaneStep[];
  routes: readonly LaneRoute[];
}

export interface LaneDeps {
  /** Host and Origin checks, as on the app's chain. */
  edge: EdgePolicy;
  /** The `WWW-Authenticate` of 401 answers, as on the app's chain. */
  challenge: AuthChallenge | undefined;
  logging: RequestLogging;
  metrics: HttpMetrics;
  bodyLimitBytes: number;
  /** Whose X-Forwarded-For names a request's client. */
  proxies: TrustedProxies;
}

interface CompiledRoute {
  route: LaneRoute;
  pattern: RegExp;
  names: string[];
}

export interface LaneMatch {
  route: LaneRoute;
  params: Record<string, string>;
}

/** A lane ready to serve: which requests it takes, and how it answers them. */
export interface LaneServer {
  match(method: string | undefined, url: string | undefined): LaneMatch | undefined;
  /** The methods of the lane's routes at `path` (for CORS preflights), if any route has that path. */
  methodsAt(path: string): string | undefined;
  serve(req: IncomingMessage, res: ServerResponse, match: LaneMatch): void;
}

function compile(route: LaneRoute): CompiledRoute {
  const names: string[] = [];
  const source = route.path
    .split('/')
    .map((segment) => {
      if (!segment.startsWith(':')) return segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      names.push(segment.slice(1));
      return '([^/]+)';
    })
    .join('/');
  // As Koa's router (not strict): one trailing slash is the same path.
  return { route, pattern: new RegExp(`^${source}/?$`), names };
}

class Exchange implements LaneExchange {
  logFields: LogFields = undefined;
  readonly state: LaneState = {};
  private readonly logOf: () => Logger;

  constructor(
    readonly request: IncomingRequest,
    readonly requestId: string,
    readonly params: Readonly<Record<string, string>>,
    private readonly res: ServerResponse,
    logging: RequestLogging,
  ) {
    this.logOf = logging.lazyLog(requestId, () => this.logFields);
  }

  get log(): Logger {
    return this.logOf();
  }

  disconnection(): Disconnection {
    return disconnection(this.res);
  }

  setHeader(name: string, value: string): void {
    this.res.setHeader(name, value);
  }

  openStream(headers: Record<string, string>): LaneStream {
    const { res } = this;
    res.writeHead(200, headers);
    return {
      write: (chunk) => void res.write(chunk),
      get congested() {
        return res.writableNeedDrain;
      },
    };
  }
}

function answer(res: ServerResponse, status: number, body: string | null): void {
  if (res.headersSent) {
    res.end(body ?? undefined); // a stream: this is its last part
    return;
  }
  res.statusCode = status;
  if (body === null) {
    res.setHeader('Content-Length', 0);
    res.end();
    return;
  }
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(body);
}

export function laneServer(lane: Lane, deps: LaneDeps): LaneServer {
  const routes = lane.routes.map(compile);
  const serve = async (req: IncomingMessage, res: ServerResponse, { route, params }: LaneMatch) => {
    const started = process.hrtime.bigint();
    const startedMs = performance.now();
    const request = incomingOf(req, deps.bodyLimitBytes, deps.proxies);
    const requestId = deps.logging.requestId(request.header('x-request-id'));
    const exchange = new Exchange(request, requestId, params, res, deps.logging);
    res.setHeader('X-Request-Id', requestId);
    let status = 500;
    try {
      // A preflight never reaches the lane (its routes take no OPTIONS), so admitting only checks here.
      deps.edge.admit(req, res);
      for (const step of lane.steps) await step(exchange);
      const handled = await route.handle(exchange);
      status = handled.status;
      answer(res, status, handled.body);
    } catch (err) {
      const failed = errorAnswer(err, exchange.log, { headers: req.headers, challenge: deps.challenge });
      if (res.headersSent) {
        // Failed while answering: nothing more can be said, and a stream still open is ended.
        if (!res.writableEnded) res.end();
        status = res.statusCode;
        return;
      }
      status = failed.status;
      for (const [name, value] of Object.entries(failed.headers ?? {})) res.setHeader(name, value);
      answer(res, status, JSON.stringify(failed.body));
    } finally {
      deps.metrics.record(request.method, route.path, status, startedMs);
      deps.logging.accessLine(
        requestId,
        exchange.logFields,
        request.method,
        pathOf(request.url),
        route.path,
        status,
        started,
      );
    }
  };
  return {
    methodsAt: (path) => {
      const methods = routes.filter(({ pattern }) => pattern.test(path)).map(({ route }) => route.method);
      return methods.length === 0 ? undefined : [...new Set(methods)].join(', ');
    },
    match: (method, url) => {
      if (method === undefined || url === undefined) return undefined;
      const path = pathOf(url);
      for (const { route, pattern, names } of routes) {
        if (route.method !== method) continue;
        const found = pattern.exec(path);
        if (!found) continue;
        const params: Record<string, string> = {};
        for (const [index, name] of names.entries()) {
          const value = found[index + 1] as string;
          try {
            params[name] = decodeURIComponent(value);
          } catch {
            params[name] = value; // as Koa's router: a malformed escape stays as sent
          }
        }
        return { route, params };
      }
      return undefined;
    },
    serve: (req, res, match) => void serve(req, res, match),
  };
}
