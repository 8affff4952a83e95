import type { Logger } from '../log.ts';

/**
 * Requests counted by method, route template and status, logged at info once per interval (and when
 * stopped) as one `requests` line, instead of a line per request: a busy gateway's access lines were
 * most of its log. Counted in nested maps, so counting a request allocates nothing.
 */
export class RequestSummary {
  private counts = new Map<string, Map<string, Map<number, number>>>();
  private total = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly logger: Logger,
    private readonly intervalMs: number,
  ) {
    this.timer = setInterval(() => this.flush(), intervalMs);
    this.timer.unref();
  }

  count(method: string, route: string, status: number): void {
    let routes = this.counts.get(method);
    if (routes === undefined) this.counts.set(method, (routes = new Map()));
    let statuses = routes.get(route);
    if (statuses === undefined) routes.set(route, (statuses = new Map()));
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
    this.total++;
  }

  /** Logs the last interval's counts, if any: `{ "GET /health": { "200": 12 } }`. */
  flush(): void {
    if (this.total === 0) return;
    const requests: Record<string, Record<string, number>> = {};
    for (const [method, routes] of this.counts)
      for (const [route, statuses] of routes) requests[`${method} ${route}`] = Object.fromEntries(statuses);
    this.logger.info({ intervalSeconds: this.intervalMs / 1000, total: this.total, requests }, 'requests');
    this.counts = new Map();
    this.total = 0;
  }

  stop(): void {
    clearInterval(this.timer);
    this.flush();
  }
}
