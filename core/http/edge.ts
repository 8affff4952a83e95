import type { IncomingMessage, ServerResponse } from 'node:http';
import { SigilError } from '@sigil/plugin-api';
import { pathOf } from './incoming.ts';

/** Where a service listens and what its operator allows at its edge (a service's config section). */
export interface EdgeSettings {
  /** The bind address (`host` in config). */
  host: string;
  /** The configured port; the port it really listens on (0: picked by the OS) is read from the first request's socket. */
  port: number;
  publicUrl?: string | undefined;
  http: {
    allowedHosts: readonly string[];
    allowedOrigins: readonly string[];
    /** Proxies whose X-Forwarded-For names the client (none when unset). */
    trustedProxies?: readonly string[];
  };
}

/**
 * Request headers a browser may send cross-origin: those of MCP clients (2025-11-25, and the standard
 * headers of 2026-07-28), x402 and ERC-8128.
 */
const ALLOWED_REQUEST_HEADERS = [
  'content-type',
  'accept',
  'authorization',
  'mcp-protocol-version',
  'mcp-method',
  'mcp-name',
  'mcp-session-id',
  'x-mcp-session',
  'last-event-id',
  'payment-signature',
  'x-payment',
  'signature',
  'signature-input',
  'content-digest',
  'x-request-id',
].join(', ');

/** Response headers a cross-origin page may read: the session, why a call was refused, payments. */
const EXPOSED_RESPONSE_HEADERS = [
  'mcp-session-id',
  'www-authenticate',
  'payment-required',
  'payment-response',
  'x-request-id',
  'x-sigil-runtime-trust',
  'retry-after',
].join(', ');

/** Methods a preflight may name for a path the service does not list itself. */
const DEFAULT_METHODS = 'GET, POST, PUT, DELETE';
/** How long a browser may reuse a preflight's answer. */
const PREFLIGHT_MAX_AGE_SECONDS = '600';

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];
/** Binds that make the service reachable on loopback: loopback itself, and every interface. */
const LOOPBACK_REACHABLE = /^(localhost|127\.\d+\.\d+\.\d+|::1|0\.0\.0\.0|::)$/;
const WILDCARD = /^(0\.0\.0\.0|::)$/;
const DEFAULT_PORTS: Record<string, string> = { 'http:': '80', 'https:': '443' };

/**
 * DNS-rebinding protection and CORS for one service, for its lane and its Koa app alike. A page on
 * another site that resolves its own name to this service's address makes the browser send that name
 * as `Host` and that site as `Origin`: both are refused before any route runs. Requests without an
 * `Origin` (non-browser clients) are served; a browser at an allowed origin gets CORS headers.
 *
 * Allowed names are strings made once (those with the port it really listens on at the first
 * request), so each request costs a set look-up or two and no URL parsing.
 */
export class EdgePolicy {
  private readonly hosts = new Set<string>();
  private readonly origins = new Set<string>();
  private readonly anyHost: boolean;
  private readonly loopback: boolean;
  /** Without a public URL, a service bound to one address is reached at that address. */
  private readonly bindName: string | undefined;
  private portLearnt = false;

  private readonly probePaths: ReadonlySet<string>;

  constructor(
    settings: EdgeSettings,
    /** The methods a route serves at a path, for preflights (undefined: the default list). */
    private readonly methodsAt: (path: string) => string | undefined = () => undefined,
    /**
     * Paths whose GET and HEAD are answered whatever the `Host`: health probes. A load balancer or
     * Kubernetes probes a service bound to every interface by the pod's address, which no operator
     * lists; what such a path shows is read-only and public, so a rebinding page gains nothing by it.
     */
    probePaths: readonly string[] = [],
  ) {
    this.probePaths = new Set(probePaths);
    this.anyHost = settings.http.allowedHosts.includes('*');
    this.loopback = LOOPBACK_REACHABLE.test(settings.host);
    const bound = settings.host.includes(':') ? `[${settings.host}]` : settings.host;
    this.bindName = settings.publicUrl === undefined && !WILDCARD.test(settings.host) ? bound : undefined;
    for (const host of settings.http.allowedHosts)
      if (host !== '*') this.allowHost(host, ['http:', 'https:']);
    for (const origin of settings.http.allowedOrigins) this.origins.add(origin.toLowerCase());
    if (settings.publicUrl !== undefined) {
      const url = new URL(settings.publicUrl);
      this.allowHost(url.host, [url.protocol]);
    }
    if (settings.port !== 0) this.allowPort(settings.port);
  }

  /**
   * Refuses a request whose `Host` or `Origin` is not allowed (421, 403, thrown), and adds the CORS
   * headers of an allowed origin. True for a CORS preflight, whose answer is then 204 with those headers.
   */
  admit(req: IncomingMessage, res: ServerResponse): boolean {
    if (!this.portLearnt) this.learnPort(req);
    const { host, origin } = req.headers;
    // No Host at all is HTTP/1.0 without a name: no browser sends that, so no page can rebind it.
    if (
      host !== undefined &&
      !this.anyHost &&
      !this.hosts.has(host) &&
      !this.hosts.has(host.toLowerCase()) &&
      !this.isProbe(req)
    )
      throw new SigilError('misdirected_request', `This service does not answer for the host "${host}"`, {
        hint: 'Use the service at its public URL; an operator adds other names to http.allowedHosts',
        details: { reason: 'host_not_allowed' },
      });
    if (origin === undefined) return false;
    if (!this.origins.has(origin) && !this.origins.has(origin.toLowerCase()))
      throw new SigilError('forbidden', `Requests from the origin "${origin}" are not allowed`, {
        hint: 'An operator allows a browser origin in http.allowedOrigins; clients that are not browsers send no Origin',
        details: { reason: 'origin_not_allowed' },
      });
    res.setHeader('Access-Control-Allow-Origin', origin);
    res.setHeader('Vary', 'Origin');
    if (req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined) {
      this.preflightHeaders(req, res);
      return true;
    }
    res.setHeader('Access-Control-Expose-Headers', EXPOSED_RESPONSE_HEADERS);
    return false;
  }

  private isProbe(req: IncomingMessage): boolean {
    if ((req.method !== 'GET' && req.method !== 'HEAD') || this.probePaths.size === 0) return false;
    return this.probePaths.has(pathOf(req.url ?? '/'));
  }

  private preflightHeaders(req: IncomingMessage, res: ServerResponse): void {
    res.setHeader('Access-Control-Allow-Methods', this.methodsAt(pathOf(req.url ?? '/')) ?? DEFAULT_METHODS);
    res.setHeader('Access-Control-Allow-Headers', ALLOWED_REQUEST_HEADERS);
    res.setHeader('Access-Control-Max-Age', PREFLIGHT_MAX_AGE_SECONDS);
  }

  /**
   * The port the service really listens on (the OS's pick, or another than configured), from the socket
   * the request came in on: the server's own, not the client's word.
   */
  private learnPort(req: IncomingMessage): void {
    const port = req.socket.localPort;
    if (port === undefined) return;
    this.portLearnt = true;
    this.allowPort(port);
  }

  /** The names with the port the service listens on (loopback's, its bind address), as hosts and origins. */
  private allowPort(port: number): void {
    if (this.bindName !== undefined) this.allowHost(`${this.bindName}:${port}`, ['http:']);
    if (this.loopback) for (const name of LOOPBACK_NAMES) this.allowHost(`${name}:${port}`, ['http:']);
  }

  /**
   * A name as clients write it in `Host` (with or without the scheme's default port), and the origins
   * of pages served under it, for each scheme it may be reached by.
   */
  private allowHost(host: string, schemes: readonly string[]): void {
    const name = host.toLowerCase();
    const colon = name.lastIndexOf(':');
    const port = colon > name.lastIndexOf(']') ? name.slice(colon + 1) : undefined;
    const bare = port === undefined ? name : name.slice(0, colon);
    this.hosts.add(name);
    for (const scheme of schemes) {
      const defaultPort = DEFAULT_PORTS[scheme];
      if (port === undefined) this.hosts.add(`${bare}:${defaultPort}`);
      else if (port === defaultPort) this.hosts.add(bare);
      this.origins.add(
        port === undefined || port === defaultPort ? `${scheme}//${bare}` : `${scheme}//${name}`,
      );
    }
  }
}
