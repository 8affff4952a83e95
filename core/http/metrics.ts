import type { Context, Next } from 'koa';
import type * as PromClient from 'prom-client';
import { importedOnce } from '../imported-once.ts';
import { promClient } from './prom-client.ts';

/** A request counted before prom-client was loaded: recorded into the registry once it is. */
interface Observation {
  method: string;
  route: string;
  status: number;
  seconds: number;
}

/**
 * Prometheus metrics for one service; a registry per app so two services in one process stay apart.
 * prom-client is imported at the first request counted (or /metrics read), after the service listens:
 * the requests finished before it is loaded are kept and counted then, so none is lost.
 */
export class HttpMetrics {
  private instruments: Instruments | undefined;
  private waiting: Observation[] = [];

  constructor(private readonly service: string) {}

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
    const observation = {
      method,
      route: route ?? 'unmatched',
      status,
      seconds: (performance.now() - started) / 1000,
    };
    if (this.instruments) return this.instruments.record(observation);
    this.waiting.push(observation);
    // A failed import is reported where the metrics are read (render), and tried again there.
    this.loaded().catch(() => undefined);
  }

  async render(ctx: Context): Promise<void> {
    const { registry } = await this.loaded();
    ctx.type = registry.contentType;
    ctx.body = await registry.metrics();
  }

  /** The registry and its instruments, made once prom-client is loaded, with the waiting requests in. */
  private readonly loaded = importedOnce(async () => {
    const instruments = new Instruments(await promClient(), this.service);
    for (const observation of this.waiting) instruments.record(observation);
    this.waiting = [];
    return (this.instruments = instruments);
  });
}

class Instruments {
  readonly registry: PromClient.Registry;
  private readonly requests: PromClient.Counter<'method' | 'route' | 'status'>;
  private readonly duration: PromClient.Histogram<'method' | 'route'>;
  /** Bounded as the labels are: methods × route templates × statuses. */
  private readonly series = new Map<
    string,
    { requests: { inc(): void }; duration: { observe(seconds: number): void } }
  >();

  constructor(client: typeof PromClient, service: string) {
    this.registry = new client.Registry();
    this.registry.setDefaultLabels({ service });
    client.collectDefaultMetrics({ register: this.registry });
    this.requests = new client.Counter({
      name: 'http_requests_total',
      help: 'HTTP requests by method, route template and status',
      labelNames: ['method', 'route', 'status'],
      registers: [this.registry],
    });
    this.duration = new client.Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request duration by method and route template',
      labelNames: ['method', 'route'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [this.registry],
    });
  }

  record({ method, route, status, seconds }: Observation): void {
    const series = this.seriesOf(method, route, status);
    series.requests.inc();
    series.duration.observe(seconds);
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
}
