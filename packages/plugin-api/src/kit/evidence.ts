import type { EvidenceRedactor } from './redact.ts';

/** One HTTP exchange as a check saw it, cut to excerpts. */
export interface HttpEvidence {
  kind: 'http';
  request: { method: string; url: string; headers: Record<string, string>; body?: string };
  /** Absent when no response came (connection refused, timeout): `error` says why. */
  response?: { status: number; headers: Record<string, string>; body?: string };
  error?: string;
  durationMs: number;
}

/** Anything else a check wants a reader to see: a decoded JWT, a probe's result, a plugin's answer. */
export interface NoteEvidence {
  kind: 'note';
  text: string;
  data?: unknown;
}

export type Evidence = HttpEvidence | NoteEvidence;

/** Bodies longer than this are cut: evidence shows what was checked, not whole payloads. */
export const EVIDENCE_BODY_LIMIT = 2_000;

export function excerpt(text: string, limit = EVIDENCE_BODY_LIMIT): string {
  return text.length <= limit ? text : `${text.slice(0, limit)}… (${text.length - limit} more characters)`;
}

/**
 * The evidence of one check. Everything is redacted as it is recorded, so no code path that reads
 * evidence later (reports, stdout, a test) can see a credential.
 */
export class EvidenceLog {
  private readonly list: Evidence[] = [];

  constructor(private readonly redactor: EvidenceRedactor) {}

  http(exchange: HttpEvidence): void {
    this.list.push(this.redactor.redactValue(exchange) as HttpEvidence);
  }

  note(text: string, data?: unknown): void {
    const note: NoteEvidence = { kind: 'note', text, ...(data === undefined ? {} : { data }) };
    this.list.push(this.redactor.redactValue(note) as NoteEvidence);
  }

  get entries(): readonly Evidence[] {
    return this.list;
  }
}

/** One line per exchange or note, e.g. `GET http://127.0.0.1:8402/health -> 200 (3 ms)`. */
export function describeEvidence(evidence: readonly Evidence[]): string[] {
  return evidence.map((entry) => {
    if (entry.kind === 'note') return entry.text;
    const outcome = entry.response ? String(entry.response.status) : `no response: ${entry.error ?? '?'}`;
    return `${entry.request.method} ${entry.request.url} -> ${outcome} (${entry.durationMs} ms)`;
  });
}
