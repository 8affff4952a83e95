import { verify as verifySignature } from 'node:crypto';
import type {
  AttestationEvidenceV2,
  EvidenceCheck,
  EvidenceVerification,
  ExpectedEvidence,
} from '@sigil/plugin-api';
import {
  certifiedHwid,
  certifiedTcb,
  parseCertificate,
  pemBlocks,
  productName,
  type AmdCertificate,
} from './certificates.ts';
import { PLATFORM } from './platform.ts';
import { ECDSA_P384_SHA384, parseReport, type SnpReport, type TcbLayout, type TcbParts } from './report.ts';
import { AMD_PRODUCTS, AMD_ROOTS, type AmdProduct, type AmdProductRoots } from './roots.ts';

/**
 * The SEV-SNP verifier: a report and its certificates in, one entry per check out. Offline and pure
 * (node:crypto, the certificate parsers and AMD's roots as constants), so that the plugin, the gateway
 * and the offline bundle script run the same code. It never throws on bad evidence.
 */

export { PLATFORM };

/** What a relying party accepts beyond what every genuine, non-debug report passes. */
export interface SnpVerificationPolicy {
  /** Accept a guest whose policy lets a migration agent be associated with it (GUEST_POLICY bit 18). */
  allowMigrationAgent: boolean;
  /** Accept a report from a platform running with SMT enabled (PLATFORM_INFO bit 0). */
  allowSmt: boolean;
  /** The lowest reported TCB accepted, by component. */
  minimumTcb?: Partial<TcbParts>;
}

/** What a relying party accepts unless it says otherwise: the plugin's defaults, the offline script's policy. */
export const DEFAULT_SNP_POLICY: SnpVerificationPolicy = { allowMigrationAgent: false, allowSmt: true };

export interface SnpVerifier {
  verify(evidence: AttestationEvidenceV2, expected?: ExpectedEvidence): EvidenceVerification;
  /** The trusted ASK and ARK (PEM) a VCEK chains to, for evidence whose host supplied no chain. */
  chainOf(leafPem: string): readonly [ask: string, ark: string] | undefined;
}

type Roots = Readonly<Record<AmdProduct, { ask: AmdCertificate; ark: AmdCertificate }>>;

interface Chain {
  ok: boolean;
  detail: string;
  /** The certificates judged, leaf first: the whole chain when it holds, what the evidence gave otherwise. */
  judged: readonly AmdCertificate[];
  product?: AmdProduct;
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');
const TCB_COMPONENTS: Readonly<Record<TcbLayout, readonly (keyof TcbParts)[]>> = {
  'milan-genoa': ['bootloader', 'tee', 'snp', 'microcode'],
  turin: ['fmc', 'bootloader', 'tee', 'snp', 'microcode'],
};
/** The subject a leaf certificate of each kind has. */
const LEAF_NAMES = { vcek: 'SEV-VCEK', vlek: 'SEV-VLEK' } as const;

function signedBy(certificate: AmdCertificate, issuer: AmdCertificate): boolean {
  try {
    return certificate.x509.verify(issuer.x509.publicKey);
  } catch {
    return false;
  }
}

/**
 * Leaf → intermediate → ARK, the ARK one of AMD's shipped with the plugin (the evidence's own root is
 * only compared with them, never trusted). Without an intermediate in the evidence a VCEK chains
 * through the shipped ASK; a VLEK's ASVK must come with the evidence.
 */
function checkChain(given: readonly AmdCertificate[], roots: Roots, leafKind: string): Chain {
  const [leaf, intermediate, root] = given;
  if (leaf === undefined) return { ok: false, detail: 'no VCEK or VLEK to chain to AMD', judged: [] };
  let products: readonly AmdProduct[] = AMD_PRODUCTS;
  if (root !== undefined) {
    const shipped = AMD_PRODUCTS.find((product) => roots[product].ark.x509.raw.equals(root.x509.raw));
    if (shipped === undefined) {
      return {
        ok: false,
        detail: `the root ${root.commonName} (SHA-256 ${root.x509.fingerprint256}) is not one of AMD's ARKs shipped with the plugin (${AMD_PRODUCTS.join(', ')})`,
        judged: given,
      };
    }
    products = [shipped];
  }
  const reasons: string[] = [];
  for (const product of products) {
    const { ask, ark } = roots[product];
    const issuer = intermediate ?? (leafKind === 'vlek' ? undefined : ask);
    if (issuer === undefined) {
      reasons.push('a VLEK needs its ASVK in the evidence (the plugin ships the ASKs only)');
      break;
    }
    if (!signedBy(issuer, ark)) reasons.push(`${issuer.commonName} is not signed by ${ark.commonName}`);
    else if (!signedBy(leaf, issuer))
      reasons.push(`${leaf.commonName} is not signed by ${issuer.commonName}`);
    else {
      return {
        ok: true,
        detail: `${leaf.commonName} ← ${issuer.commonName} ← ${ark.commonName}, AMD's ${product} root shipped with the plugin`,
        judged: [leaf, issuer, ark],
        product,
      };
    }
  }
  return { ok: false, detail: reasons.join('; '), judged: given };
}

function checkValidity(judged: readonly AmdCertificate[], at: Date): EvidenceCheck {
  const when = at.toISOString();
  if (judged.length === 0) return { id: 'validity', ok: false, detail: 'no certificate to judge' };
  const problems = judged.flatMap((certificate) => {
    if (at < certificate.notBefore)
      return [`${certificate.commonName} is not valid before ${certificate.notBefore.toISOString()}`];
    if (at > certificate.notAfter)
      return [`${certificate.commonName} expired ${certificate.notAfter.toISOString()}`];
    return [];
  });
  return problems.length === 0
    ? { id: 'validity', ok: true, detail: `${judged.map((c) => c.commonName).join(', ')} valid at ${when}` }
    : { id: 'validity', ok: false, detail: `at ${when}: ${problems.join('; ')}` };
}

function checkSignature(report: SnpReport, leaf: AmdCertificate | undefined): EvidenceCheck {
  const fail = (detail: string) => ({ id: 'signature', ok: false, detail });
  if (report.signatureAlgorithm !== ECDSA_P384_SHA384)
    return fail(`signature algorithm ${report.signatureAlgorithm} is not ECDSA P-384 with SHA-384 (1)`);
  if (report.signingKey !== 'vcek' && report.signingKey !== 'vlek')
    return fail(`the report names signing key ${report.signingKey}, neither the VCEK nor a VLEK`);
  if (leaf === undefined) return fail(`no ${report.signingKey.toUpperCase()} to check the signature with`);
  if (leaf.commonName !== LEAF_NAMES[report.signingKey])
    return fail(
      `the report is signed by its ${report.signingKey.toUpperCase()}, the leaf certificate is ${leaf.commonName}`,
    );
  const key = leaf.x509.publicKey;
  if (key.asymmetricKeyDetails?.namedCurve !== 'secp384r1')
    return fail(`${leaf.commonName}'s key is not an ECDSA P-384 key`);
  if (report.signature === undefined) return fail('r or s is longer than a P-384 scalar');
  const valid = verifySignature(
    'sha384',
    report.signed,
    { key, dsaEncoding: 'ieee-p1363' },
    report.signature,
  );
  return valid
    ? {
        id: 'signature',
        ok: true,
        detail: `ECDSA P-384 signature over bytes 0x000–0x29F by ${leaf.commonName}`,
      }
    : fail(`the ECDSA P-384 signature over bytes 0x000–0x29F does not verify with ${leaf.commonName}'s key`);
}

const describeTcb = (tcb: Partial<TcbParts>) =>
  Object.entries(tcb)
    .map(([name, value]) => `${name} ${value}`)
    .join(', ');

/** The reported TCB is the one the VCEK was issued for (AMD derives a VCEK per chip and TCB). */
function checkCertifiedTcb(report: SnpReport, leaf: AmdCertificate | undefined): EvidenceCheck {
  if (leaf === undefined) return { id: 'tcb', ok: false, detail: 'no VCEK to compare the reported TCB with' };
  const certified = certifiedTcb(leaf, report.tcbLayout);
  const mismatches = TCB_COMPONENTS[report.tcbLayout].filter(
    (name) => certified[name] !== report.reportedTcb[name],
  );
  return mismatches.length === 0
    ? {
        id: 'tcb',
        ok: true,
        detail: `reported TCB (${describeTcb(report.reportedTcb)}) is the ${leaf.commonName}'s`,
      }
    : {
        id: 'tcb',
        ok: false,
        detail: `reported TCB differs from ${leaf.commonName}'s: ${mismatches
          .map(
            (name) =>
              `${name} ${report.reportedTcb[name]} in the report, ${certified[name] ?? 'absent'} in the certificate`,
          )
          .join('; ')}`,
      };
}

function checkChipId(report: SnpReport, leaf: AmdCertificate | undefined): EvidenceCheck {
  const id = 'chip-id';
  if (leaf === undefined) return { id, ok: false, detail: 'no VCEK to compare the chip id with' };
  if (leaf.commonName === LEAF_NAMES.vlek)
    return { id, ok: true, detail: 'a VLEK is issued to a cloud provider, not a chip: no hwid to compare' };
  if (report.chipId.every((byte) => byte === 0))
    return {
      id,
      ok: true,
      detail: 'the chip id is masked (all zero) in the report; the VCEK signature binds the chip',
    };
  const hwid = certifiedHwid(leaf);
  if (hwid === undefined) return { id, ok: false, detail: `${leaf.commonName} has no hwid extension` };
  const reported = report.chipId.subarray(0, hwid.length);
  return Buffer.from(hwid).equals(reported) && report.chipId.subarray(hwid.length).every((byte) => byte === 0)
    ? { id, ok: true, detail: `chip id is the ${leaf.commonName}'s hwid` }
    : {
        id,
        ok: false,
        detail: `chip id ${hex(report.chipId)} is not the ${leaf.commonName}'s hwid ${hex(hwid)}`,
      };
}

function checkMinimumTcb(report: SnpReport, minimum: Partial<TcbParts>): EvidenceCheck {
  const below = TCB_COMPONENTS[report.tcbLayout].filter((name) => {
    const lowest = minimum[name];
    return lowest !== undefined && (report.reportedTcb[name] ?? 0) < lowest;
  });
  return below.length === 0
    ? {
        id: 'tcb-minimum',
        ok: true,
        detail: `reported TCB (${describeTcb(report.reportedTcb)}) meets the minimum (${describeTcb(minimum)})`,
      }
    : {
        id: 'tcb-minimum',
        ok: false,
        detail: `reported TCB is below the minimum: ${below
          .map((name) => `${name} ${report.reportedTcb[name]} < ${minimum[name]}`)
          .join(', ')}`,
      };
}

function policyChecks(report: SnpReport, policy: SnpVerificationPolicy): EvidenceCheck[] {
  const { debug, migrateMa, smt } = report.policy;
  const { smtEnabled } = report.platformInfo;
  return [
    debug
      ? {
          id: 'debug',
          ok: false,
          detail: 'the guest policy allows debugging (bit 19): the hypervisor can read and write its memory',
        }
      : { id: 'debug', ok: true, detail: 'the guest policy forbids debugging (bit 19 off)' },
    {
      id: 'migration-agent',
      ok: policy.allowMigrationAgent || !migrateMa,
      detail: migrateMa
        ? `the guest policy allows a migration agent (bit 18), which this verifier ${policy.allowMigrationAgent ? 'accepts' : 'refuses'}`
        : 'the guest policy allows no migration agent (bit 18 off)',
    },
    {
      id: 'smt',
      ok: policy.allowSmt || !smtEnabled,
      detail: `the platform runs with SMT ${smtEnabled ? 'enabled' : 'disabled'} (the guest policy ${smt ? 'allows' : 'forbids'} it), which this verifier ${policy.allowSmt || !smtEnabled ? 'accepts' : 'refuses'}`,
    },
  ];
}

function expectedChecks(report: SnpReport, expected: ExpectedEvidence): EvidenceCheck[] {
  const checks: EvidenceCheck[] = [];
  if (expected.reportData !== undefined) {
    const ok = Buffer.from(expected.reportData).equals(report.reportData);
    checks.push({
      id: 'report-data',
      ok,
      detail: ok
        ? 'REPORT_DATA is the expected 64 bytes'
        : `REPORT_DATA ${hex(report.reportData)} is not the expected ${hex(expected.reportData)}`,
    });
  }
  for (const [name, value] of Object.entries(expected.measurements ?? {})) {
    const measurement = hex(report.measurement);
    checks.push(
      name !== 'measurement'
        ? {
            id: 'measurement',
            ok: false,
            detail: `sev-snp reports no measurement named ${name} (only measurement)`,
          }
        : measurement === value.toLowerCase()
          ? { id: 'measurement', ok: true, detail: 'MEASUREMENT is the expected launch digest' }
          : {
              id: 'measurement',
              ok: false,
              detail: `MEASUREMENT ${measurement} is not the expected ${value}`,
            },
    );
  }
  return checks;
}

function claimsOf(report: SnpReport, leaf: AmdCertificate | undefined, product: AmdProduct | undefined) {
  return {
    reportData: hex(report.reportData),
    measurements: { measurement: hex(report.measurement) },
    details: {
      version: report.version,
      guestSvn: report.guestSvn,
      policy: { raw: `0x${report.policyRaw.toString(16)}`, ...report.policy },
      vmpl: report.vmpl,
      signingKey: report.signingKey,
      platformInfo: report.platformInfo,
      currentTcb: report.currentTcb,
      reportedTcb: report.reportedTcb,
      committedTcb: report.committedTcb,
      launchTcb: report.launchTcb,
      currentVersion: report.currentVersion,
      committedVersion: report.committedVersion,
      chipId: hex(report.chipId),
      hostData: hex(report.hostData),
      familyId: hex(report.familyId),
      imageId: hex(report.imageId),
      idKeyDigest: hex(report.idKeyDigest),
      authorKeyDigest: hex(report.authorKeyDigest),
      authorKeyEnabled: report.authorKeyEnabled,
      reportId: hex(report.reportId),
      reportIdMa: hex(report.reportIdMa),
      ...(report.cpuid === undefined ? {} : { cpuid: report.cpuid }),
      ...(product === undefined ? {} : { product }),
      ...(leaf === undefined ? {} : { certifiedProduct: productName(leaf) }),
    },
  };
}

/** The evidence's certificates, parsed, leaf first; a failed check when one cannot be read. */
function readCertificates(
  certificates: readonly string[],
  parse: (pem: string) => AmdCertificate,
): { parsed: AmdCertificate[]; check: EvidenceCheck } {
  const blocks = pemBlocks(certificates);
  const id = 'certificates';
  if (blocks.length === 0)
    return {
      parsed: [],
      check: { id, ok: false, detail: 'the evidence carries no PEM certificate: the VCEK is needed' },
    };
  if (blocks.length > 3)
    return {
      parsed: [],
      check: { id, ok: false, detail: `${blocks.length} certificates; at most 3 (VCEK, ASK, ARK)` },
    };
  const parsed: AmdCertificate[] = [];
  for (const [index, block] of blocks.entries()) {
    try {
      parsed.push(parse(block));
    } catch (error) {
      return {
        parsed: [],
        check: {
          id,
          ok: false,
          detail: `certificate ${index + 1} cannot be read: ${(error as Error).message}`,
        },
      };
    }
  }
  return { parsed, check: { id, ok: true, detail: parsed.map((c) => c.commonName).join(', ') } };
}

interface Judge {
  roots: Roots;
  policy: SnpVerificationPolicy;
  parse: (pem: string) => AmdCertificate;
}

function verifyWith(
  { roots, policy, parse }: Judge,
  evidence: AttestationEvidenceV2,
  expected: ExpectedEvidence,
  at: Date,
): EvidenceVerification {
  const parsed = parseReport(Buffer.from(evidence.report, 'base64'));
  if (!parsed.ok)
    return {
      platform: PLATFORM,
      verified: false,
      checks: [{ id: parsed.check, ok: false, detail: parsed.detail }],
    };
  const { report } = parsed;
  const certificates = readCertificates(evidence.certificates, parse);
  const [leaf] = certificates.parsed;
  const chain = checkChain(certificates.parsed, roots, report.signingKey);
  const checks: EvidenceCheck[] = [
    { id: 'report', ok: true, detail: `SEV-SNP attestation report version ${report.version}` },
    certificates.check,
    { id: 'chain', ok: chain.ok, detail: chain.detail },
    checkValidity(chain.judged, at),
    checkSignature(report, leaf),
    checkCertifiedTcb(report, leaf),
    checkChipId(report, leaf),
    ...(policy.minimumTcb === undefined ? [] : [checkMinimumTcb(report, policy.minimumTcb)]),
    ...policyChecks(report, policy),
    ...expectedChecks(report, expected),
  ];
  return {
    platform: PLATFORM,
    verified: checks.every((check) => check.ok),
    checks,
    claims: claimsOf(report, leaf, chain.product),
  };
}

/** Parsed certificates kept per verifier: a relying party sees the same VCEK and chain again and again. */
const PARSED_CERTIFICATES_KEPT = 32;

export interface SnpVerifierOptions {
  /** Judges certificates when the caller gives no `expected.at`. */
  now?: () => Date;
  /**
   * The roots trusted, PEM by product: AMD's, shipped with the plugin, unless a test of the verifier's
   * own logic gives roots it made (the plugin never does).
   */
  roots?: Readonly<Record<AmdProduct, AmdProductRoots>>;
}

/** A verifier for `policy`. It parses its roots on first use and keeps what it parsed. */
export function createSnpVerifier(
  policy: SnpVerificationPolicy,
  { now = () => new Date(), roots: rootPems = AMD_ROOTS }: SnpVerifierOptions = {},
): SnpVerifier {
  const parsed = new Map<string, AmdCertificate>();
  const parse = (pem: string, lazy = false): AmdCertificate => {
    const known = parsed.get(pem);
    if (known !== undefined) return known;
    const certificate = parseCertificate(pem, { lazy });
    if (parsed.size >= PARSED_CERTIFICATES_KEPT) parsed.delete(parsed.keys().next().value as string);
    parsed.set(pem, certificate);
    return certificate;
  };
  let judge: Judge | undefined;
  const firstJudge = (): Judge => {
    const entries = AMD_PRODUCTS.map((product) => {
      const [ask, ark] = pemBlocks([rootPems[product].ask, rootPems[product].ark]).map((pem) =>
        parse(pem, true),
      );
      return [product, { ask, ark }];
    });
    return { roots: Object.fromEntries(entries) as Roots, policy, parse };
  };
  return {
    chainOf(leafPem) {
      judge ??= firstJudge();
      const { roots } = judge;
      const leaf = parse(leafPem);
      const product = AMD_PRODUCTS.find((candidate) => signedBy(leaf, roots[candidate].ask));
      return product === undefined ? undefined : [rootPems[product].ask, rootPems[product].ark];
    },
    verify(evidence, expected = {}) {
      try {
        judge ??= firstJudge();
        return verifyWith(judge, evidence, expected, expected.at ?? now());
      } catch (error) {
        // Every reader above turns bad input into a failed check; this keeps the promise for what they missed.
        const detail = `the evidence could not be judged: ${(error as Error).message}`;
        return { platform: PLATFORM, verified: false, checks: [{ id: 'evidence', ok: false, detail }] };
      }
    },
  };
}
