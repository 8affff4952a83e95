import { z } from 'zod';
import { ensure, failWith, pass, type Level, type Outcome } from '@sigil/plugin-api/kit';
import type { ServiceName } from '../../http.ts';
import type { DeploymentContext, Requirement, RequirementGroup } from '../context.ts';
import { expectJson, expectStatus } from '../expect.ts';
import { BUNDLE_PATH, checkBundle } from './bundle.ts';
import { checkProvenance, PROVENANCE_PATH } from './provenance.ts';
import { freshNonce, REPORT_PATH, reportSchema, requestReport, verifiedReportData } from './report.ts';

/**
 * The attestation endpoints both services serve (runtime spec part 4, gateway spec part 4), free and
 * unauthenticated: the runner sends no credential. The runtime spec names the paths only; the fields
 * are read as the gateway spec names them, where Sigil puts them on both services.
 *
 * Each endpoint is one declaration below, checked on both services (`RT-4.<slug>`, `GW-4.<slug>`).
 */

export const SUMMARY_PATH = '/api/attestation';
const SECURITY_PATH = '/api/attestation/security';
const BUILD_INFO_PATH = '/api/attestation/build-info';

interface AttestationEndpoint {
  /** The id on each service: `attestation-summary` is `RT-4.attestation-summary` and `GW-4.attestation-summary`. */
  slug: string;
  level: Level;
  title: string;
  /** The row of each spec's endpoint table it checks. */
  spec: Readonly<Record<ServiceName, string>>;
  groups?: readonly RequirementGroup[];
  /** A service whose spec does not list the endpoint checks it at this level instead. */
  levels?: Partial<Record<ServiceName, Level>>;
  check(context: DeploymentContext, service: ServiceName): Promise<Outcome>;
}

const spec = (runtimeRow: string, gatewayRow: string): AttestationEndpoint['spec'] => ({
  runtime: `runtime spec part 4, endpoints: ${runtimeRow}`,
  gateway: `gateway spec part 4, REST endpoints: ${gatewayRow}`,
});

const sha256Hex = z.string().regex(/^[0-9a-fA-F]{64}$/, 'a SHA-256 in hex (64 characters)');
const KEY_SOURCES = ['sealed', 'config', 'ephemeral'] as const;

const summarySchema = z.looseObject({
  teeEnabled: z.boolean(),
  platform: z.string().min(1),
  codeHash: sha256Hex,
  keySource: z.string().optional(),
});

export async function readSummary(
  context: DeploymentContext,
  service: ServiceName,
): Promise<z.infer<typeof summarySchema>> {
  const response = await context.http.request({ service, path: SUMMARY_PATH });
  return expectJson(response, 200, summarySchema, `GET ${SUMMARY_PATH} on the ${service}`);
}

/** Sigil's `/security`: the TEE and mode on both services; the gateway adds its sandboxes and ERC-8128 mode. */
const securitySchema = z.looseObject({
  mode: z.string().min(1),
  tee: z.looseObject({ platform: z.string().min(1), keySource: z.enum(KEY_SOURCES) }),
});
const gatewaySecuritySchema = z.looseObject({
  sandboxes: z.array(z.looseObject({ runtime: z.string().min(1) })).min(1),
  erc8128: z.looseObject({ enforceOperatorMcp: z.boolean() }),
});

/** Sigil's names for what the gateway spec calls git commit, source hash and build time. */
const buildInfoSchema = z.looseObject({
  gitCommit: z.string().min(1),
  codeHash: sha256Hex,
  builtAt: z.union([z.iso.datetime({ offset: true }), z.null()]),
});

/** Nonces the report must refuse: not hex, 31 bytes, 33 bytes. */
const BAD_NONCES = ['zz'.repeat(32), 'ab'.repeat(31), 'ab'.repeat(33)];

const ENDPOINTS: readonly AttestationEndpoint[] = [
  {
    slug: 'attestation-summary',
    level: 'MUST',
    title: `GET ${SUMMARY_PATH} answers without credentials with teeEnabled, platform and codeHash; teeEnabled exactly when a report carries evidence, of that platform`,
    spec: spec(
      '/api/attestation, "summary of the confidential-VM attestation"',
      'GET /api/attestation, "TEE summary and security properties; response fields include teeEnabled, platform, codeHash"',
    ),
    check: async (context, service) => {
      const summary = await readSummary(context, service);
      const response = await requestReport(context, service, freshNonce());
      const { evidence } = expectJson(response, 200, reportSchema, `GET ${REPORT_PATH} on the ${service}`);
      if (!summary.teeEnabled) {
        ensure(
          evidence === null,
          `the summary says teeEnabled false, yet a report carries ${evidence?.platform} evidence`,
        );
        return pass();
      }
      if (evidence === null) failWith('the summary says teeEnabled true, yet a report carries no evidence');
      ensure(
        evidence.platform === summary.platform,
        `the summary names platform ${summary.platform}, a report carries ${evidence.platform} evidence`,
      );
      return pass();
    },
  },
  {
    slug: 'attestation-report',
    level: 'MUST',
    title: `GET ${REPORT_PATH}?nonce=<fresh 64 hex> answers without credentials with evidence (report, certificates) the runner verifies with its platform's verifier, binding that nonce at REPORT_DATA[0:32]`,
    spec: spec(
      '/api/attestation/report, "hardware attestation report"',
      'GET /api/attestation/report, "raw attestation report and certificates"',
    ),
    groups: ['tee'],
    check: async (context, service) => {
      await verifiedReportData(context, service);
      return pass();
    },
  },
  {
    slug: 'attestation-report-bad-nonce',
    level: 'MUST',
    title: `GET ${REPORT_PATH} refuses a nonce that is not 32 bytes of hex (not hex, 31 or 33 bytes) with a 4xx, after a good nonce is answered`,
    spec: spec(
      '/api/attestation/report, "hardware attestation report"',
      'GET /api/attestation/report, "raw attestation report and certificates"',
    ),
    check: async (context, service) => {
      expectStatus(
        await requestReport(context, service, freshNonce()),
        200,
        `GET ${REPORT_PATH} on the ${service} with a good nonce`,
      );
      for (const nonce of BAD_NONCES) {
        const { status } = await context.http.request({ service, path: `${REPORT_PATH}?nonce=${nonce}` });
        ensure(status !== 429, `the ${service} rate-limited the runner (429), so a refusal cannot be judged`);
        ensure(
          status >= 400 && status < 500,
          `the ${service} answered ${status} to the nonce ${nonce}, not a 4xx refusal`,
        );
      }
      return pass();
    },
  },
  {
    slug: 'attestation-security',
    level: 'MUST',
    title: `GET ${SECURITY_PATH} answers without credentials with the mode and the TEE's platform and key source, as the summary names them (the gateway: its sandboxes and ERC-8128 mode too)`,
    spec: spec(
      '/api/attestation/security, "security features"',
      'GET /api/attestation/security, "security feature details"',
    ),
    check: async (context, service) => {
      const response = await context.http.request({ service, path: SECURITY_PATH });
      const what = `GET ${SECURITY_PATH} on the ${service}`;
      const security = expectJson(response, 200, securitySchema, what);
      const summary = await readSummary(context, service);
      ensure(
        security.tee.platform === summary.platform,
        `${what} names platform ${security.tee.platform}, the summary ${summary.platform}`,
      );
      ensure(
        summary.keySource === undefined || security.tee.keySource === summary.keySource,
        `${what} names key source ${security.tee.keySource}, the summary ${summary.keySource}`,
      );
      if (service === 'gateway') {
        const { erc8128 } = expectJson(response, 200, gatewaySecuritySchema, what);
        ensure(
          !context.target.expectOperatorEnforcement || erc8128.enforceOperatorMcp,
          `${what} says ERC-8128 operator enforcement is off, and the tester states the gateway enforces it`,
        );
      }
      return pass();
    },
  },
  {
    slug: 'attestation-build-info',
    level: 'MUST',
    title: `GET ${BUILD_INFO_PATH} answers without credentials with the git commit, source hash and build time (gitCommit, codeHash, builtAt: a time or null), its source hash the summary's codeHash`,
    spec: spec(
      '/api/attestation/build-info, "build metadata"',
      'GET /api/attestation/build-info, "git commit, source hash, build time"',
    ),
    check: async (context, service) => {
      const response = await context.http.request({ service, path: BUILD_INFO_PATH });
      const build = expectJson(response, 200, buildInfoSchema, `GET ${BUILD_INFO_PATH} on the ${service}`);
      const { codeHash } = await readSummary(context, service);
      ensure(
        build.codeHash.toLowerCase() === codeHash.toLowerCase(),
        `the build's source hash (codeHash) is ${build.codeHash}, the summary's codeHash ${codeHash}`,
      );
      return pass();
    },
  },
  {
    slug: 'attestation-provenance',
    level: 'MUST',
    title: `GET ${PROVENANCE_PATH} answers without credentials with an in-toto statement (SLSA provenance) in a DSSE envelope whose signature verifies with the Ed25519 key given, its subject the summary's codeHash`,
    spec: spec(
      '/api/attestation/provenance, "signed build provenance"',
      'GET /api/attestation/provenance, "signed build provenance metadata"',
    ),
    check: checkProvenance,
  },
  {
    slug: 'attestation-bundle',
    level: 'MUST',
    title: `GET ${BUNDLE_PATH}?nonce=<fresh> answers without credentials with a bundle for that nonce that the runner verifies offline, and whose offlineVerification.script, run with plain node in an empty folder holding only the bundle, exits 0`,
    spec: spec(
      "not in its table; Sigil serves the gateway's bundle on the runtime too, so a SHOULD there",
      'GET /api/attestation/bundle, "offline verification bundle; field offlineVerification.script holds a verification script"',
    ),
    groups: ['tee'],
    levels: { runtime: 'SHOULD' },
    check: checkBundle,
  },
];

const ID_PARTS = { runtime: 'RT-4', gateway: 'GW-4' } as const;
const SERVICES = ['runtime', 'gateway'] as const;

/** The requirement of one endpoint on each service. */
const onBothServices = (endpoint: AttestationEndpoint): Requirement[] =>
  SERVICES.map((service) => ({
    id: `${ID_PARTS[service]}.${endpoint.slug}`,
    level: endpoint.levels?.[service] ?? endpoint.level,
    title: `The ${service}: ${endpoint.title}`,
    spec: endpoint.spec[service],
    service,
    ...(endpoint.groups === undefined ? {} : { groups: endpoint.groups }),
    check: (context) => endpoint.check(context, service),
  }));

export const attestationEndpointRequirements: readonly Requirement[] = ENDPOINTS.flatMap(onBothServices);
