import type { RequestListener } from 'node:http';
import { createRequire } from 'node:module';
import Koa from 'koa';
import type Router from '@koa/router';
import type * as BodyParserModule from '@koa/bodyparser';
import type { Logger } from '../log.ts';
import { EdgePolicy, type EdgeSettings } from './edge.ts';
import { errorHandler, type AuthChallenge } from './errors.ts';
import { HttpMetrics } from './metrics.ts';
import { laneServer, type Lane, type LaneServer } from './lane.ts';
import { RequestLogging, requestContext } from './request-context.ts';
import { TrustedProxies } from './trusted-proxies.ts';

export interface HttpAppOptions {
  service: string;
  logger: Logger;
  bodyLimitBytes: number;
  /**
   * Where the service listens and what its edge allows (its config section): Host, Origin, CORS, and
   * the proxies whose X-Forwarded-For names the client.
   */
  edge: EdgeSettings;
  /** The `WWW-Authenticate` of the service's 401 answers (wallet auth's `challenge`). */
  challenge?: AuthChallenge;
  /** Paths whose GET and HEAD any `Host` may read: health probes (see `EdgePolicy`). */
  probePaths?: readonly string[];
  /** Routers in the order they should match. */
  routers: readonly Router[];
  /** Middleware to run after parsing and before the routers (e.g. authentication). */
  middleware?: readonly Koa.Middleware[];
  /** How often the count of requests by route and status is logged at info; never without it. */
  requestSummaryMs?: number;
  /** Routes served without Koa, with the same request id, access line, metrics and error shape. */
  lane?: Lane;
}

export interface HttpApp {
  app: Koa;
  metrics: HttpMetrics;
  /** The service's request listener: its lane's routes, then the app. */
  callback(): RequestListener;
  /** Logs the last request summary and stops summarizing (at shutdown). */
  stopLogging(): void;
}

/**
 * The one place a service's middleware is assembled, in this order: request id and log line,
 * metrics (served at `/metrics`), error shape, Host and Origin checks (and CORS), body parsing with a
 * size limit, the service's middleware, its routes; and, before all of it, the routes of its lane,
 * which run the same steps up to the body.
 */
export function createHttpApp(options: HttpAppOptions): HttpApp {
  const app = new Koa({ proxy: false });
  app.silent = true;
  const metrics = new HttpMetrics(options.service);
  const logging = new RequestLogging(options.logger, options.requestSummaryMs);
  const { lane } = options;
  // A preflight for a lane's path lists the lane's methods there (POST for /mcp).
  const edge = new EdgePolicy(options.edge, (path) => laned?.methodsAt(path), options.probePaths);
  const proxies = new TrustedProxies(options.edge.http.trustedProxies ?? []);
  const laned: LaneServer | undefined = lane
    ? laneServer(lane, {
        edge,
        challenge: options.challenge,
        logging,
        metrics,
        bodyLimitBytes: options.bodyLimitBytes,
        proxies,
      })
    : undefined;
  // Koa trusts no proxy (`proxy: false`: anyone could send X-Forwarded-For); `ctx.ip`, which the
  // per-address limits read, is set here from the proxies the operator trusts.
  if (proxies.any)
    app.use((ctx, next) => {
      ctx.request.ip = proxies.clientAddress(ctx.req.socket.remoteAddress ?? '', ctx.get('x-forwarded-for'));
      return next();
    });
  app.use(requestContext(logging));
  app.use(metrics.middleware());
  app.use(errorHandler(options.logger, options.challenge));
  app.use(async (ctx, next) => {
    if (edge.admit(ctx.req, ctx.res)) ctx.status = 204;
    else await next();
  });
  app.use(
    onFirstRequest(() =>
      requireBodyParser()({
        enableTypes: ['json'],
        jsonLimit: options.bodyLimitBytes,
        encoding: 'utf-8',
      }),
    ),
  );
  app.use(async (ctx, next) =>
    ctx.method === 'GET' && ctx.path === '/metrics' ? metrics.render(ctx) : next(),
  );
  for (const middleware of options.middleware ?? []) app.use(middleware);
  for (const router of options.routers) {
    app.use(router.routes());
    app.use(router.allowedMethods({ throw: true }));
  }
  const stopLogging = () => logging.stop();
  if (!laned) return { app, metrics, stopLogging, callback: () => app.callback() };
  return {
    app,
    metrics,
    stopLogging,
    callback: () => {
      const served = app.callback();
      return (req, res) => {
        const match = laned.match(req.method, req.url);
        if (match) laned.serve(req, res, match);
        else void served(req, res);
      };
    },
  };
}

/**
 * @koa/bodyparser (CommonJS; co-body with iconv-lite's tables, about 60 ms of start-up, issue 30),
 * required by the first request that reaches Koa: MCP calls served by the lane never need it.
 */
const requireBodyParser = (): typeof BodyParserModule.bodyParser =>
  (createRequire(import.meta.url)('@koa/bodyparser') as typeof BodyParserModule).bodyParser;

/** The middleware `make` gives, made by the first request that reaches it. */
function onFirstRequest(make: () => Koa.Middleware): Koa.Middleware {
  let middleware: Koa.Middleware | undefined;
  return (ctx, next) => {
    middleware ??= make();
    return middleware(ctx, next);
  };
}
