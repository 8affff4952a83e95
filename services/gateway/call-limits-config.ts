import { z } from 'zod';

/**
 * What one caller may hold of the gateway's MCP server processes, and how long a call waits for one:
 * a slow or hanging call holds a process until its time limit, so without these a few callers held
 * them all (docs/security.md).
 */
export const callLimitsSchema = z
  .object({
    perWallet: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .default(8)
      .describe(
        'Tool calls one wallet may have in flight on each replica (queued included); more are refused 429. Counted per replica: with N gateway replicas a wallet may have up to N times this in flight',
      ),
    perAnonymousClient: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .default(4)
      .describe(
        'Tool calls one anonymous client (its address, as gateway.http.trustedProxies tells it; an IPv6 /64) may have in flight on each replica (N replicas: up to N times this); more are refused 429',
      ),
    queueLength: z
      .number()
      .int()
      .min(0)
      .max(100_000)
      .default(64)
      .describe(
        'Calls that may wait for a process on each replica while all its maxRunningServers are busy; more are refused 503',
      ),
    queueWaitSeconds: z
      .number()
      .int()
      .min(0)
      .max(300)
      .default(10)
      .describe('How long a call waits for a process before a 503'),
  })
  .strict()
  .prefault({});
