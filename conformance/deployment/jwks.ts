import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { z } from 'zod';
import type { DeploymentContext } from './context.ts';
import { expectJson } from './expect.ts';

/** The runtime's JWKS (runtime spec part 4, `GET /.well-known/jwks.json`), as served and as parsed. */

export const JWKS_PATH = '/.well-known/jwks.json';

const jwkSchema = z.looseObject({
  kty: z.string(),
  kid: z.string().optional(),
  alg: z.string().optional(),
  crv: z.string().optional(),
  x: z.string().optional(),
  y: z.string().optional(),
});
const jwksSchema = z.looseObject({ keys: z.array(jwkSchema) });

export interface RuntimeJwks {
  text: string;
  document: z.infer<typeof jwksSchema>;
}

export async function readJwks(context: DeploymentContext): Promise<RuntimeJwks> {
  const response = await context.http.request({ service: 'runtime', path: JWKS_PATH });
  const document = expectJson(response, 200, jwksSchema, `GET ${JWKS_PATH}`);
  return { text: response.text, document };
}

const JWKS_HASH_BYTES = 16;

/**
 * What REPORT_DATA[32:48] may hold for this JWKS, in hex: the first 16 bytes of its SHA-256 over its
 * RFC 8785 form (Sigil's), or over the bytes served (the spec says "its hash" and no more).
 */
export function jwksHashPrefixes({ text, document }: RuntimeJwks): string[] {
  const canonical = canonicalize(document);
  return [...(canonical === undefined ? [] : [canonical]), text].map((form) =>
    createHash('sha256').update(form).digest().subarray(0, JWKS_HASH_BYTES).toString('hex'),
  );
}
