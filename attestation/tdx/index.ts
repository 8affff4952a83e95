import { hkdfSync } from 'node:crypto';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { coreServices, definePlugin, SigilError } from '@sigil/plugin-api';
import { directorySource, pccsSource, type CollateralSource } from './collateral.ts';
import { parseTdxQuote, type TdxQuote } from './quote.ts';
import { TCB_STATUSES } from './tcb.ts';
import { probeTsm, TSM_REPORT_ROOT, tsmQuote, type TsmProbe } from './tsm.ts';
import { TDX_PLATFORM, verifyTdxEvidence } from './verify.ts';

/** The module the offline bundle script carries to verify this platform's evidence (.js in a build). */
const OFFLINE_VERIFIER = fileURLToPath(
  new URL(`./offline-verifier${extname(import.meta.url)}`, import.meta.url),
);

/** TCB statuses an operator may accept besides UpToDate; OutOfDate and Revoked never pass. */
const ACCEPTABLE_TCB_STATUSES = TCB_STATUSES.filter(
  (status) => status === 'SWHardeningNeeded' || status.startsWith('Configuration'),
) as ['SWHardeningNeeded', 'ConfigurationNeeded', 'ConfigurationAndSWHardeningNeeded'];

const REPORT_DATA_BYTES = 64;

function quoteFrom(report: Uint8Array): TdxQuote {
  try {
    return parseTdxQuote(report);
  } catch (error) {
    throw new SigilError('internal', `tee-tdx: configfs-tsm gave no TDX quote: ${(error as Error).message}`);
  }
}

/**
 * Intel TDX: quotes through configfs-tsm with their collateral, and the verifier of TDX quotes
 * (verify.ts). TDX exposes no sealing key to a Linux guest, so keys are derived from `keyMaterial`
 * and reported as coming from config.
 */
export default definePlugin({
  kind: 'tee-backend',
  name: 'tee-tdx',
  specVersion: 'v2',
  description: 'Intel TDX: quotes through configfs-tsm with their collateral; verifies TDX quotes offline',
  config: z
    .object({
      keyMaterial: z
        .string()
        .min(32, 'at least 32 characters of secret material')
        .describe(
          'Secret that keys (e.g. the execution-proof HMAC key) are derived from: TDX seals nothing for a Linux guest; same value on every replica',
        ),
      collateralDir: z
        .string()
        .min(1)
        .optional()
        .describe(
          'Directory of Intel PCS responses for this platform, attached to every quote: tcbInfo.json, tcbInfoIssuerChain.pem, qeIdentity.json, qeIdentityIssuerChain.pem, pckCrl.der, rootCaCrl.der',
        ),
      pccsUrl: z
        .url()
        .optional()
        .describe(
          'PCCS (or Intel PCS, https://api.trustedservices.intel.com) the collateral is fetched from at attest time, kept until its next update',
        ),
      rootCaCrlUrl: z
        .url()
        .default('https://certificates.trustedservices.intel.com/IntelSGXRootCA.der')
        .describe('Where the Intel SGX Root CA CRL is fetched from, with pccsUrl'),
      acceptedTcbStatuses: z
        .array(z.enum(ACCEPTABLE_TCB_STATUSES))
        .default([])
        .describe('TCB statuses that verify besides UpToDate (OutOfDate and Revoked never do)'),
      tsmReportPath: z
        .string()
        .default(TSM_REPORT_ROOT)
        .describe('The configfs-tsm report directory quotes are requested from'),
    })
    .strict()
    .refine((config) => (config.collateralDir === undefined) !== (config.pccsUrl === undefined), {
      message: 'give exactly one of collateralDir and pccsUrl: where the quotes’ collateral comes from',
    }),
  dependencies: { secrets: coreServices.secrets, fetch: coreServices.fetch, clock: coreServices.clock },
  create: ({ config, deps }) => {
    deps.secrets.add(config.keyMaterial);
    const collateral: CollateralSource =
      config.pccsUrl === undefined
        ? directorySource(config.collateralDir as string)
        : pccsSource({
            url: config.pccsUrl,
            rootCaCrlUrl: config.rootCaCrlUrl,
            fetch: deps.fetch,
            clock: deps.clock,
          });
    let probe: Promise<TsmProbe> | undefined;
    const probed = () => (probe ??= probeTsm(config.tsmReportPath));
    const verifierOptions = { acceptedTcbStatuses: config.acceptedTcbStatuses };
    return {
      specVersion: 'v2' as const,
      platform: TDX_PLATFORM,
      offlineVerifier: OFFLINE_VERIFIER,
      async start() {
        const found = await probed();
        if (!found.available)
          throw new SigilError('unavailable', `tee-tdx: no Intel TDX here: ${found.reason}`, {
            hint: 'run in a TDX guest (Linux ≥ 6.7 with configfs-tsm), or use tee-none where there is no TEE',
            details: { reason: 'tee_unavailable', lookedFor: [config.tsmReportPath, '/dev/tdx_guest'] },
          });
      },
      status: async () => ({
        teeEnabled: (await probed()).available,
        platform: TDX_PLATFORM,
        keySource: 'config' as const,
      }),
      async attest(reportData: Uint8Array) {
        if (reportData.length !== REPORT_DATA_BYTES)
          throw new SigilError(
            'invalid_request',
            `report data is ${reportData.length} bytes, not ${REPORT_DATA_BYTES}`,
          );
        if (!(await probed()).available) return undefined;
        const report = await tsmQuote(config.tsmReportPath, reportData);
        const quote = quoteFrom(report);
        return {
          platform: TDX_PLATFORM,
          report: Buffer.from(report).toString('base64'),
          certificates: quote.pckChain,
          collateral: await collateral.collateralFor(quote),
        };
      },
      signingKey: (purpose: string) =>
        Promise.resolve({
          key: new Uint8Array(
            hkdfSync('sha256', config.keyMaterial, 'sigil:tee-tdx', `sigil:${purpose}`, 32),
          ),
          source: 'config' as const,
        }),
      verify: async (evidence, expected) => {
        if (evidence.platform !== TDX_PLATFORM)
          throw new SigilError('invalid_request', `tee-tdx verifies no ${evidence.platform} evidence`, {
            details: { reason: 'platform_mismatch' },
          });
        return verifyTdxEvidence(evidence, expected, verifierOptions);
      },
    };
  },
});
