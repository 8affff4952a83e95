import { z } from 'zod';
import { SERVER_LIMITS } from '../http/server.ts';
import { asInt, asList, asString, type EnvOverrides } from './env.ts';
import { addressOrBlock, port } from './values.ts';

/** What a service accepts at its HTTP edge, before any route: names, origins, time and connections. */
const httpEdgeSchema = z
  .object({
    allowedHosts: z
      .array(z.string().min(1))
      .default([])
      .describe(
        'Host header values accepted besides the public URL\'s host and, when bound to loopback or all interfaces, localhost, 127.0.0.1 and [::1] with the port (e.g. "gw.internal:8402"); "*" accepts any, only behind a proxy that checks Host itself',
      ),
    allowedOrigins: z
      .array(z.string().regex(/^https?:\/\/[^/]+$/, 'must be an origin: scheme://host[:port], no path'))
      .default([])
      .describe(
        "Browser origins that may call the service cross-origin (CORS), e.g. https://app.example.com; the service's own origins are always allowed, any other Origin is refused",
      ),
    headersTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(300_000)
      .default(SERVER_LIMITS.headersTimeoutMs)
      .describe(
        'A request whose headers have not all arrived by then is answered 408 and its connection closed',
      ),
    requestTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(3_600_000)
      .default(SERVER_LIMITS.requestTimeoutMs)
      .describe(
        'The whole request, headers and body, must arrive within this (the body read timeout); answering it may take longer',
      ),
    keepAliveTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(600_000)
      .default(SERVER_LIMITS.keepAliveTimeoutMs)
      .describe('An idle keep-alive connection is closed after this'),
    maxConnections: z
      .number()
      .int()
      .min(1)
      .max(1_000_000)
      .default(SERVER_LIMITS.maxConnections)
      .describe('Open connections beyond this are closed as they arrive'),
    maxConnectionsPerClient: z
      .number()
      .int()
      .min(0)
      .max(1_000_000)
      .default(SERVER_LIMITS.maxConnectionsPerClient)
      .describe(
        'Open connections from one client address (an IPv6 /64) to this replica beyond this are closed as they arrive; 0 turns it off. Connections from trustedProxies are not capped per client (the proxy caps its clients)',
      ),
    trustedProxies: z
      .array(addressOrBlock)
      .default([])
      .describe(
        "Proxies and load balancers (addresses or CIDR blocks) whose X-Forwarded-For names the client, for the per-client limits; from any other peer the header is ignored and the client is the connection's remote address",
      ),
  })
  .strict()
  .refine((http) => http.headersTimeoutMs <= http.requestTimeoutMs, {
    path: ['headersTimeoutMs'],
    message: 'must not exceed requestTimeoutMs',
  });

/** The section of an HTTP service: where it listens, its public URL, its edge. */
export const serviceSchema = (defaultPort: number) =>
  z
    .object({
      host: z.string().default('127.0.0.1').describe('Address the service listens on'),
      port: port.default(defaultPort).describe('Port the service listens on'),
      publicUrl: z
        .url()
        .optional()
        .describe(
          'URL clients use to reach the service (behind a load balancer: its URL); SIWE domain and URI are checked against it. Required where replicas share the database',
        ),
      bodyLimitBytes: z
        .number()
        .int()
        .positive()
        .default(1_048_576)
        .describe('Largest request body; a larger one is answered 413'),
      http: httpEdgeSchema
        .prefault({})
        .describe('The HTTP edge: allowed Host and Origin values, timeouts, connections'),
    })
    .strict();

/** The environment variables of a service section `serviceSchema` made: `<PREFIX>_HOST` and so on. */
export const serviceEnv = (prefix: string, section: string): EnvOverrides => ({
  [`${prefix}_HOST`]: { path: `${section}.host`, coerce: asString },
  [`${prefix}_PORT`]: { path: `${section}.port`, coerce: asInt },
  [`${prefix}_PUBLIC_URL`]: { path: `${section}.publicUrl`, coerce: asString },
  [`${prefix}_ALLOWED_HOSTS`]: { path: `${section}.http.allowedHosts`, coerce: asList },
  [`${prefix}_ALLOWED_ORIGINS`]: { path: `${section}.http.allowedOrigins`, coerce: asList },
  [`${prefix}_TRUSTED_PROXIES`]: { path: `${section}.http.trustedProxies`, coerce: asList },
});
