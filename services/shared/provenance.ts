import { createPublicKey } from 'node:crypto';
import type { TeeBackendV2, TeeStatus } from '@sigil/plugin-api';
import { sha256 } from '../../core/crypto.ts';
import { ROOT_FILES, SOURCE_DIRS, type BuildInfo } from './build-info.ts';
import { ed25519FromSeed, ed25519Raw, signEnvelope, type DsseEnvelope } from './dsse.ts';
import { SIGIL_VERSION } from './health.ts';
import {
  CODE_SUBJECT,
  IN_TOTO_PAYLOAD_TYPE,
  IN_TOTO_STATEMENT,
  LOCKFILE_DEPENDENCY,
  SLSA_PROVENANCE,
} from './in-toto.ts';

/**
 * The build provenance both services serve (`GET /api/attestation/provenance`): an in-toto Statement
 * v1 whose subject is the code by its code hash, with a SLSA provenance v1 predicate (the source, the
 * Node.js version, the lockfile), in a DSSE envelope signed with Ed25519. The key's seed is the TEE
 * backend's `signingKey('build-provenance')` (sealed to the hardware where the backend seals), and the
 * key's hash is bound at REPORT_DATA[48:64] of every report, so the chain reads hardware → key →
 * provenance → code hash.
 */

/** Node.js runs the TypeScript sources as they are (through tsx): the code is the source tree. */
export const SOURCE_BUILD_TYPE = 'urn:sigil:build-type:node-source:v1';
/** Node.js runs the output of `npm run build` (tsc, tsconfig.build.json): the code is that output. */
export const COMPILED_BUILD_TYPE = 'urn:sigil:build-type:node-compiled:v1';
/** The running service states its own build; its TEE report vouches for the key it signs with. */
export const BUILDER_ID = 'urn:sigil:builder:attested-service';
export const PROVENANCE_KEY_PURPOSE = 'build-provenance';

export interface BuildProvenance {
  /** The statement, signed. */
  envelope: DsseEnvelope;
  publicKey: {
    algorithm: 'Ed25519';
    pem: string;
    /** The raw 32 bytes, hex: what REPORT_DATA[48:64] binds the SHA-256 of. */
    hex: string;
  };
  /** Hex SHA-256 of the raw public key; its first 16 bytes are REPORT_DATA[48:64]. */
  keyid: string;
  /** Where the key's seed comes from, as the TEE backend says. */
  keySource: TeeStatus['keySource'];
}

const resource = (name: string, digest: Record<string, string>, uri?: string) => ({
  name,
  ...(uri === undefined ? {} : { uri }),
  digest,
});

export function provenanceStatement(info: BuildInfo): Record<string, unknown> {
  const source = info.sourceRepository === null ? {} : { repository: info.sourceRepository };
  const commitKnown = info.gitCommit !== 'unknown';
  return {
    _type: IN_TOTO_STATEMENT,
    subject: [
      {
        name: CODE_SUBJECT,
        digest: { sha256: info.codeHash },
        annotations: {
          hashOf:
            'SHA-256 of one line per file covered, sorted: its path, NUL, the hex SHA-256 of its content; lines joined by LF',
          covers: [...SOURCE_DIRS.map((dir) => `${dir}/**`), ...ROOT_FILES],
          files: info.files,
        },
      },
    ],
    predicateType: SLSA_PROVENANCE,
    predicate: {
      buildDefinition: {
        buildType: info.compiled ? COMPILED_BUILD_TYPE : SOURCE_BUILD_TYPE,
        externalParameters: { source: { ...source, gitCommit: info.gitCommit } },
        internalParameters: { nodeVersion: info.nodeVersion },
        resolvedDependencies: [
          ...(commitKnown
            ? [
                resource(
                  'source',
                  { gitCommit: info.gitCommit },
                  info.sourceRepository === null ? undefined : `git+${info.sourceRepository}`,
                ),
              ]
            : []),
          ...(info.lockfileSha256 === null
            ? []
            : [resource(LOCKFILE_DEPENDENCY, { sha256: info.lockfileSha256 })]),
        ],
      },
      runDetails: {
        builder: { id: BUILDER_ID, version: { sigil: SIGIL_VERSION } },
        ...(info.builtAt === null ? {} : { metadata: { finishedOn: info.builtAt } }),
      },
    },
  };
}

/** The provenance key the TEE backend's seed for it makes: the Ed25519 key, its raw public key and id. */
async function provenanceKey(tee: TeeBackendV2) {
  const seed = await tee.signingKey(PROVENANCE_KEY_PURPOSE);
  const privateKey = ed25519FromSeed(seed.key);
  const raw = ed25519Raw(privateKey);
  return { source: seed.source, privateKey, raw, keyid: sha256(raw).toString('hex') };
}

/**
 * The id of the key the service signs its provenance with (public: the provenance carries the key).
 * The TEE backend derives every key it gives from one source (its sealed keys, or `keyMaterial`), so
 * two processes with the same id have the same backend keys.
 */
export const provenanceKeyId = async (tee: TeeBackendV2): Promise<string> => (await provenanceKey(tee)).keyid;

export async function signedProvenance(tee: TeeBackendV2, info: BuildInfo): Promise<BuildProvenance> {
  const { source, privateKey, raw, keyid } = await provenanceKey(tee);
  const payload = Buffer.from(JSON.stringify(provenanceStatement(info)), 'utf8');
  return {
    envelope: signEnvelope(IN_TOTO_PAYLOAD_TYPE, payload, { privateKey, keyid }),
    publicKey: {
      algorithm: 'Ed25519',
      pem: createPublicKey(privateKey).export({ type: 'spki', format: 'pem' }) as string,
      hex: raw.toString('hex'),
    },
    keyid,
    keySource: source,
  };
}

/**
 * The service's provenance, signed on first use and kept: the code, and the backend's key for a
 * purpose, do not change under a running process. A failure is not kept, so the next request tries again.
 */
export function provenanceOf(tee: TeeBackendV2, info: () => BuildInfo): () => Promise<BuildProvenance> {
  let signed: Promise<BuildProvenance> | undefined;
  return () => {
    signed ??= signedProvenance(tee, info()).catch((err: unknown) => {
      signed = undefined;
      throw err;
    });
    return signed;
  };
}
