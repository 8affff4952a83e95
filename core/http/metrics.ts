import type { Context, Next } from 'koa';
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Prometheus metrics for one service; a registry per app so two services in one process stay apart. */
export class HttpMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'method' | 'route' | 'status'>;
  private readonly duration: Histogram<'method' | 'route'>;
  /** Bounded as the labels are: methods × route templates × statuses. */
  private readonly series = new Map<
    string,
    { requests: { inc(): void }; duration: { observe(seconds: number): void } }
  >();

  constructor(service: string) {
    this.registry.setDefaultLabels({ service });
    collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({
      name: 'http_requests_total',
      help: 'HTTP requests by method, route template and status',
      labelNames: ['method', 'route', 'status'],
      registers: [this.registry],
    });
    this.duration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request duration by method and route template',
      labelNames: ['method', 'route'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [this.registry],
    });
  }

  middleware() {
    return async (ctx: Context, next: Next): Promise<void> => {
      const started = performance.now();
      try {
        await next();
      } finally {
        const route = (ctx as Context & { _matchedRoute?: string })._matchedRoute;
        this.record(ctx.method, route, ctx.status, started);
      }
    };
  }

  /** Counts a request that began at `started` (performance.now()) and observes its duration. */
  record(method: string, route: string | undefined, status: number, started: number): void {
    // The route template, not the path, keeps label cardinality bounded.
    const series = this.seriesOf(method, route ?? 'unmatched', status);
    series.requests.inc();
    series.duration.observe((performance.now() - started) / 1000);
  }

  /** The counter and histogram of one label set, looked up once (prom-client hashes labels on each use). */
  private seriesOf(method: string, route: string, status: number) {
    const key = `${method} ${status} ${route}`;
    let series = this.series.get(key);
    if (!series) {
      series = {
        requests: this.requests.labels({ method, route, status: String(status) }),
        duration: this.duration.labels({ method, route }),
      };
      this.series.set(key, series);
    }
    return series;
  }

  async render(ctx: Context): Promise<void> {
    ctx.type = this.registry.contentType;
    ctx.body = await this.registry.metrics();
  }
}
