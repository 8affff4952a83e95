import { z } from 'zod';
import { type AttestationEvidence, SigilError } from '@sigil/plugin-api';

/**
 * Where the gateway reads the runtime it trusts: its JWKS and, for a nonce, its attestation evidence
 * (undefined when it has none). Over HTTP from the runtime's URL, or directly from a runtime served by
 * the same process (`sigil up`), which needs no address.
 */
export interface RuntimeSource {
  /** For logs: the runtime's URL, or `in-process`. */
  readonly name: string;
  jwks(): Promise<unknown>;
  evidence(nonce: Uint8Array): Promise<AttestationEvidence | undefined>;
}

const FETCH_TIMEOUT_MS = 5_000;
const MAX_DOCUMENT_BYTES = 64 * 1024;

const evidenceSchema = z.object({
  platform: z.string().min(1),
  report: z.string(),
  certificates: z.array(z.string()).default([]),
});
const reportSchema = z.looseObject({ evidence: evidenceSchema.nullable().optional() });

/** `GET <url>/.well-known/jwks.json` and `GET <url>/api/attestation/report?nonce=<hex>`. */
export class HttpRuntimeSource implements RuntimeSource {
  readonly name: string;

  constructor(url: string) {
    this.name = url.replace(/\/+$/, '');
  }

  jwks(): Promise<unknown> {
    return fetchJson(`${this.name}/.well-known/jwks.json`);
  }

  async evidence(nonce: Uint8Array): Promise<AttestationEvidence | undefined> {
    const url = `${this.name}/api/attestation/report?nonce=${Buffer.from(nonce).toString('hex')}`;
    return reportSchema.parse(await fetchJson(url)).evidence ?? undefined;
  }
}

async function fetchJson(url: string): Promise<unknown> {
  const response = await fetch(url, {
    headers: { accept: 'application/json' },
    redirect: 'error',
    signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
  });
  const body = await response.text();
  if (!response.ok) {
    throw new SigilError('unavailable', `HTTP ${response.status} from ${url}`, {
      details: { reason: 'runtime_refused', status: response.status },
    });
  }
  if (body.length > MAX_DOCUMENT_BYTES) {
    throw new SigilError('unavailable', `the document at ${url} is too large`, {
      details: { reason: 'document_too_large', limitBytes: MAX_DOCUMENT_BYTES },
    });
  }
  return JSON.parse(body) as unknown;
}
