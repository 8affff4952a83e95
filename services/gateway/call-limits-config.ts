import { isIP } from 'node:net';
import { z } from 'zod';

/** An IPv4 or IPv6 address, or a CIDR block of them. */
const addressOrBlock = z.string().refine((value) => {
  const [ip = '', bits, ...rest] = value.split('/');
  const family = isIP(ip);
  if (family === 0 || rest.length > 0) return false;
  if (bits === undefined) return true;
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128);
}, 'an IP address or a CIDR block (10.0.0.0/8, fd00::/8)');

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
      .describe('Tool calls one wallet may have in flight (queued included); more are refused 429'),
    perAnonymousClient: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .default(4)
      .describe(
        'Tool calls one anonymous client (a remote address; an IPv6 /64) may have in flight; more are refused 429',
      ),
    queueLength: z
      .number()
      .int()
      .min(0)
      .max(100_000)
      .default(64)
      .describe(
        'Calls that may wait for a process while all maxRunningServers are busy; more are refused 503',
      ),
    queueWaitSeconds: z
      .number()
      .int()
      .min(0)
      .max(300)
      .default(10)
      .describe('How long a call waits for a process before a 503'),
    trustedProxies: z
      .array(addressOrBlock)
      .default([])
      .describe(
        "Proxies whose X-Forwarded-For names the anonymous client; otherwise the client is the connection's remote address (behind a proxy: the proxy)",
      ),
  })
  .strict()
  .prefault({});
