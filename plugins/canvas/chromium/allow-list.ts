/**
 * Where the browser of one node run may go: the allowed origins, and the run's preview (a URL
 * prefix: the preview shares its origin with the runtime's API, which the page has no business
 * reaching). WebSocket URLs count as the http origin of the same host and port (`ws:` as `http:`).
 */
export class AllowList {
  private readonly origins: ReadonlySet<string>;
  private readonly previewPrefix: string | undefined;
  /** `host:port` of every allowed origin, for tunnels (CONNECT), which name no scheme nor path. */
  private readonly tunnels: ReadonlySet<string>;

  constructor(origins: readonly string[], previewUrl: string | undefined) {
    this.origins = new Set(origins);
    this.previewPrefix = previewUrl === undefined ? undefined : new URL(previewUrl).href;
    const reachable = [...origins, ...(previewUrl === undefined ? [] : [previewUrl])];
    this.tunnels = new Set(reachable.map((origin) => hostPort(new URL(origin))));
  }

  /** Whether a request to `url` (absolute) may go out. */
  allows(url: string): boolean {
    const parsed = parse(url);
    if (parsed === undefined) return false;
    const origin = originOf(parsed);
    if (origin === undefined) return false;
    if (this.origins.has(origin)) return true;
    return this.previewPrefix !== undefined && parsed.href.startsWith(this.previewPrefix);
  }

  /** Whether a tunnel (CONNECT) to `target` may be opened. */
  allowsTunnel(target: TunnelTarget): boolean {
    return this.tunnels.has(`${target.hostname}:${target.port}`);
  }
}

/** Where a CONNECT request asks to go: `hostname` as URLs write it (`[::1]`), `host` to connect to. */
export interface TunnelTarget {
  hostname: string;
  host: string;
  port: number;
}

/** The `host:port` of a CONNECT request, or undefined when it is not one (a port is required). */
export function tunnelTarget(target: string): TunnelTarget | undefined {
  if (!/:\d{1,5}$/.test(target)) return undefined;
  const parsed = parse(`http://${target}`);
  if (parsed === undefined || parsed.pathname !== '/' || parsed.username !== '') return undefined;
  const port = Number(parsed.port || '80');
  return { hostname: parsed.hostname, host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'), port };
}

/** The http(s) origin of a URL (`ws:` and `wss:` as `http:` and `https:`), or undefined for other schemes. */
export function originOf(url: URL): string | undefined {
  const scheme = { 'http:': 'http:', 'https:': 'https:', 'ws:': 'http:', 'wss:': 'https:' }[url.protocol];
  if (scheme === undefined) return undefined;
  return new URL(`${scheme}//${url.host}`).origin;
}

/** `hostname:port`, the port written out even when it is the scheme's default. */
function hostPort(url: URL): string {
  const port = url.port || (url.protocol === 'https:' || url.protocol === 'wss:' ? '443' : '80');
  return `${url.hostname}:${port}`;
}

function parse(url: string): URL | undefined {
  try {
    return new URL(url);
  } catch {
    return undefined;
  }
}
