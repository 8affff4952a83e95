import { createHash, createPublicKey } from 'node:crypto';
import { z } from 'zod';
import { ensure, expectShape, failWith, pass } from '@sigil/plugin-api/kit';
import type { ServiceName } from '../../http.ts';
import type { DeploymentContext } from '../context.ts';
import { expectJson } from '../expect.ts';
import { envelopeVerifies } from '../../../services/shared/dsse.ts';
import { IN_TOTO_STATEMENT, SLSA_PROVENANCE } from '../../../services/shared/in-toto.ts';
import { readSummary } from './endpoints.ts';

/**
 * `GET /api/attestation/provenance` as the runner reads it: an in-toto statement with a SLSA provenance
 * predicate in a DSSE envelope, its signature verified with the Ed25519 key given beside it, naming
 * the code the summary's codeHash names. Whether the key is the attested one is for REPORT_DATA[48:64].
 */

export const PROVENANCE_PATH = '/api/attestation/provenance';

const provenanceSchema = z.looseObject({
  envelope: z.looseObject({
    payloadType: z.string(),
    payload: z.string(),
    signatures: z.array(z.looseObject({ sig: z.string(), keyid: z.string() })).min(1),
  }),
  publicKey: z.looseObject({ hex: z.string().regex(/^[0-9a-fA-F]{64}$/, 'a raw Ed25519 key in hex') }),
});
const statementSchema = z.looseObject({
  _type: z.literal(IN_TOTO_STATEMENT),
  predicateType: z.literal(SLSA_PROVENANCE),
  subject: z.array(z.looseObject({ digest: z.record(z.string(), z.string()) })).min(1),
});

/** The Ed25519 key as SubjectPublicKeyInfo: the fixed 12-byte prefix, then the raw 32 bytes (RFC 8410). */
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** The provenance, its signature verified and its subject the summary's code; the raw key's SHA-256. */
export async function verifiedProvenance(
  context: DeploymentContext,
  service: ServiceName,
): Promise<{ keySha256: Buffer }> {
  const what = `GET ${PROVENANCE_PATH} on the ${service}`;
  const response = await context.http.request({ service, path: PROVENANCE_PATH });
  const { envelope, publicKey } = expectJson(response, 200, provenanceSchema, what);
  const raw = Buffer.from(publicKey.hex, 'hex');
  const key = createPublicKey({
    key: Buffer.concat([ED25519_SPKI_PREFIX, raw]),
    format: 'der',
    type: 'spki',
  });
  ensure(
    envelopeVerifies(envelope, key),
    `${what}: no signature of the DSSE envelope verifies with the Ed25519 key given (publicKey.hex)`,
  );
  let statement: unknown;
  try {
    statement = JSON.parse(Buffer.from(envelope.payload, 'base64').toString('utf8'));
  } catch {
    return failWith(`${what}: the envelope's payload is not JSON`);
  }
  const { subject } = expectShape(statementSchema, statement, `${what}: the signed statement`);
  const { codeHash } = await readSummary(context, service);
  ensure(
    subject.some((entry) => entry.digest.sha256?.toLowerCase() === codeHash.toLowerCase()),
    `${what}: no subject of the signed statement has the summary's codeHash ${codeHash} as its sha256`,
  );
  return { keySha256: createHash('sha256').update(raw).digest() };
}

export const checkProvenance = async (context: DeploymentContext, service: ServiceName) => {
  await verifiedProvenance(context, service);
  return pass();
};
