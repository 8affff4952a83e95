import { hkdfSync, randomBytes } from 'node:crypto';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { coreServices, definePlugin, SigilError, type AttestationEvidenceV2 } from '@sigil/plugin-api';
import {
  cachedLeaf,
  DEFAULT_TSM_REPORT_DIR,
  LEAF_FILES,
  requestExtendedReport,
  tableCertificates,
} from './guest.ts';
import { createSnpVerifier, DEFAULT_SNP_POLICY, PLATFORM } from './verify.ts';

const REPORT_DATA_BYTES = 64;
/** The module the offline bundle script carries to verify this platform's evidence (.js in a build). */
const OFFLINE_VERIFIER = fileURLToPath(
  new URL(`./offline-verifier${extname(import.meta.url)}`, import.meta.url),
);
const secretMaterial = z.string().min(32, 'at least 32 characters of secret material');
const tcbComponent = (name: string) =>
  z.number().int().min(0).max(255).optional().describe(`Lowest ${name} security version accepted`);

/**
 * AMD SEV-SNP. On an SNP guest it attests through configfs-tsm, with the VCEK from the host's
 * certificate table or a configured directory (never fetched from AMD); anywhere it verifies SNP
 * evidence offline against AMD's roots shipped in roots.ts. Keys come from config: SNP's derived keys
 * (MSG_KEY_REQ) are reachable only through /dev/sev-guest's ioctl, which this plugin does not make.
 */
export default definePlugin({
  kind: 'tee-backend',
  name: 'tee-sev-snp',
  specVersion: 'v2',
  description: 'AMD SEV-SNP: reports through configfs-tsm, verified offline against AMD roots it ships',
  config: z
    .object({
      keyMaterial: secretMaterial
        .optional()
        .describe(
          'Secret that keys are derived from (keySource config; SNP-derived keys need an ioctl this plugin does not make); without it keys are random per process, refused where replicas share the database',
        ),
      tsmReportDir: z
        .string()
        .default(DEFAULT_TSM_REPORT_DIR)
        .describe('The configfs-tsm report directory reports are requested through'),
      certificatesDir: z
        .string()
        .optional()
        .describe(
          `Directory holding this chip's VCEK (${LEAF_FILES.join(', ')}), used when the host supplies no certificate table`,
        ),
      allowMigrationAgent: z
        .boolean()
        .default(DEFAULT_SNP_POLICY.allowMigrationAgent)
        .describe('Accept evidence whose guest policy allows a migration agent'),
      allowSmt: z
        .boolean()
        .default(DEFAULT_SNP_POLICY.allowSmt)
        .describe('Accept evidence from a platform running with SMT enabled'),
      minimumTcb: z
        .object({
          bootloader: tcbComponent('boot loader'),
          tee: tcbComponent('TEE'),
          snp: tcbComponent('SNP firmware'),
          microcode: tcbComponent('microcode'),
          fmc: tcbComponent('FMC (Turin)'),
        })
        .strict()
        .optional()
        .describe('The lowest reported TCB accepted, by component (fmc on Turin only)'),
    })
    .strict(),
  dependencies: { secrets: coreServices.secrets, clock: coreServices.clock },
  create: ({ config, deps, logger }) => {
    const material = config.keyMaterial;
    const keySource = material === undefined ? ('ephemeral' as const) : ('config' as const);
    if (material === undefined)
      logger.warn('tee-sev-snp: no keyMaterial configured; keys are random per process');
    else deps.secrets.add(material);
    const keys = new Map<string, Uint8Array>();
    const verifier = createSnpVerifier(
      {
        allowMigrationAgent: config.allowMigrationAgent,
        allowSmt: config.allowSmt,
        ...(config.minimumTcb === undefined ? {} : { minimumTcb: config.minimumTcb }),
      },
      { now: () => deps.clock.now() },
    );
    let started = false;

    /** [leaf, ASK, ARK], PEM: the host's certificate table first, then the cached VCEK and AMD's shipped chain. */
    async function certificatesFor(table: Uint8Array): Promise<string[]> {
      const fromTable = tableCertificates(table);
      const leaf =
        fromTable.leaf ??
        (config.certificatesDir === undefined ? undefined : await cachedLeaf(config.certificatesDir));
      if (leaf === undefined) {
        throw new SigilError(
          'unavailable',
          `tee-sev-snp: no VCEK: the host supplied no certificate table with the report${
            config.certificatesDir === undefined
              ? ', and no certificatesDir is configured'
              : ` and ${config.certificatesDir} holds none of ${LEAF_FILES.join(', ')}`
          }`,
          {
            details: { reason: 'vcek_unavailable' },
            hint: "Put this chip's VCEK (e.g. from `snpguest fetch vcek`) in certificatesDir",
          },
        );
      }
      if (fromTable.ask !== undefined && fromTable.ark !== undefined)
        return [leaf, fromTable.ask, fromTable.ark];
      return [leaf, ...(verifier.chainOf(leaf) ?? [])];
    }

    async function attest(reportData: Uint8Array): Promise<AttestationEvidenceV2> {
      if (reportData.length !== REPORT_DATA_BYTES)
        throw new SigilError(
          'invalid_request',
          `report data is ${REPORT_DATA_BYTES} bytes, not ${reportData.length}`,
        );
      const { report, certificateTable } = await requestExtendedReport(config.tsmReportDir, reportData);
      return {
        platform: PLATFORM,
        report: report.toString('base64'),
        certificates: await certificatesFor(certificateTable),
      };
    }

    return {
      specVersion: 'v2' as const,
      platform: PLATFORM,
      offlineVerifier: OFFLINE_VERIFIER,
      // A report of our own, verified: the start fails where there is no SNP guest or no VCEK, and says
      // what of its own evidence would not verify (a debug guest, a VCEK of another TCB).
      start: async () => {
        const result = verifier.verify(await attest(new Uint8Array(REPORT_DATA_BYTES)));
        for (const check of result.checks.filter((entry) => !entry.ok))
          logger.warn(
            { check: check.id },
            `tee-sev-snp: its own evidence fails ${check.id}: ${check.detail}`,
          );
        started = true;
      },
      status: () => Promise.resolve({ teeEnabled: started, platform: PLATFORM, keySource }),
      attest,
      signingKey: (purpose: string) => {
        let key = keys.get(purpose);
        if (key === undefined) {
          key =
            material === undefined
              ? new Uint8Array(randomBytes(32))
              : new Uint8Array(hkdfSync('sha256', material, 'sigil:tee-sev-snp', `sigil:${purpose}`, 32));
          keys.set(purpose, key);
        }
        return Promise.resolve({ key, source: keySource });
      },
      verify: (evidence, expected) =>
        evidence.platform === PLATFORM
          ? Promise.resolve(verifier.verify(evidence, expected))
          : Promise.reject(
              new SigilError('invalid_request', `tee-sev-snp verifies no ${evidence.platform} evidence`, {
                details: { reason: 'platform_mismatch' },
              }),
            ),
    };
  },
});
