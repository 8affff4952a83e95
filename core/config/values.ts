import { isIP } from 'node:net';
import { z } from 'zod';

/** A TCP port; 0 has the OS pick one. */
export const port = z.number().int().min(0).max(65535);

/** An EVM account address. */
export const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address');

/** An EVM account's private key. */
export const privateKey = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, 'must be a 0x-prefixed 32-byte hex private key');

/** An IPv4 or IPv6 address, or a CIDR block of them (10.0.0.0/8, fd00::/8). */
export const addressOrBlock = z.string().refine((value) => {
  const [ip = '', bits, ...rest] = value.split('/');
  const family = isIP(ip);
  if (family === 0 || rest.length > 0) return false;
  if (bits === undefined) return true;
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128);
}, 'an IP address or a CIDR block (10.0.0.0/8, fd00::/8)');
