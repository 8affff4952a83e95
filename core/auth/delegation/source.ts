import { z } from 'zod';
import { type AttestationEvidenceV2, SigilError } from '@sigil/plugin-api';

/**
 * Where the gateway reads the runtime it trusts: its JWKS and, for a nonce, its attestation report.
 * Over HTTP from the runtime's URL, or directly from a runtime served by the same process (`sigil
 * up`), which needs no address.
 */
export interface RuntimeSource {
  /** For logs: the runtime's URL, or `in-process`. */
  readonly name: string;
  jwks(): Promise<unknown>;
  report(nonce: Uint8Array): Promise<RuntimeReport>;
}

/** What the runtime answers for a nonce: nothing in it is taken on trust before its verifier checks it. */
export interface RuntimeReport {
  /** Its evidence; undefined when it has none (`tee-none`). */
  evidence: AttestationEvidenceV2 | undefined;
  /** The 64 bytes of REPORT_DATA it says the evidence binds. */
  reportData: Uint8Array | undefined;
}

const FETCH_TIMEOUT_MS = 5_000;
const MAX_JWKS_BYTES = 64 * 1024;
/** A report carries its certificate chain and collateral (a TDX quote's TCB info and CRLs run to tens of KiB). */
const MAX_REPORT_BYTES = 1024 * 1024;

const evidenceSchema = z.object({
  platform: z.string().min(1),
  report: z.string(),
  certificates: z.array(z.string()).default([]),
  collateral: z.record(z.string(), z.string()).optional(),
});
const reportSchema = z.looseObject({
  evidence: evidenceSchema.nullable().optional(),
  // Only a help for reading a report that binds its digest: in another form it is left unread.
  reportData: z
    .string()
    .regex(/^[0-9a-fA-F]{128}$/)
    .optional()
    .catch(undefined),
});

/** `GET <url>/.well-known/jwks.json` and `GET <url>/api/attestation/report?nonce=<hex>`. */
export class HttpRuntimeSource implements RuntimeSource {
  readonly name: string;

  constructor(url: string) {
    this.name = url.replace(/\/+$/, '');
  }

  jwks(): Promise<unknown> {
    return fetchJson(`${this.name}/.well-known/jwks.json`, MAX_JWKS_BYTES);
  }

  async report(nonce: Uint8Array): Promise<RuntimeReport> {
    const url = `${this.name}/api/attestation/report?nonce=${Buffer.from(nonce).toString('hex')}`;
    const { evidence, reportData } = reportSchema.parse(await fetchJson(url, MAX_REPORT_BYTES));
    return {
      evidence: evidence ?? undefined,
      reportData: reportData === undefined ? undefined : Buffer.from(reportData, 'hex'),
    };
  }
}

async function fetchJson(url: string, limitBytes: number): Promise<unknown> {
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
  if (body.length > limitBytes) {
    throw new SigilError('unavailable', `the document at ${url} is too large`, {
      details: { reason: 'document_too_large', limitBytes },
    });
  }
  return JSON.parse(body) as unknown;
}
