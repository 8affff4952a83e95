import { z } from 'zod';

/** A TCP port; 0 has the OS pick one. */
export const port = z.number().int().min(0).max(65535);

/** An EVM account address. */
export const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address');

/** An EVM account's private key. */
export const privateKey = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, 'must be a 0x-prefixed 32-byte hex private key');
