import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { coreServices, definePlugin, SigilError } from '@sigil/plugin-api';
import { vtpmConfigSchema } from './config.ts';
import { keyFor, SEALED_PURPOSES } from './keys.ts';
import { VTPM_PLUGIN_NAME } from './name.ts';
import { Quoter } from './quote.ts';
import { unsealKeys } from './seal.ts';
import { Tpm } from './tpm.ts';
import { verifyVtpmEvidence, VTPM_PLATFORM } from './verify.ts';

/** The module the offline bundle script carries to verify this platform's evidence (.js in a build). */
const OFFLINE_VERIFIER = fileURLToPath(
  new URL(`./offline-verifier${extname(import.meta.url)}`, import.meta.url),
);

/**
 * A TPM 2.0 (a confidential VM's vTPM, a machine's TPM, swtpm in tests) through tpm2-tools: keys
 * sealed to PCRs by `sigil tee seal` and unsealed at start-up, quotes by an attestation key over
 * REPORT_DATA, and their verification in TypeScript. See README.md beside this file.
 */
export default definePlugin({
  kind: 'tee-backend',
  name: VTPM_PLUGIN_NAME,
  specVersion: 'v2',
  description: 'A TPM 2.0 (vTPM): keys sealed to PCRs, quotes by an attestation key',
  config: vtpmConfigSchema,
  dependencies: { secrets: coreServices.secrets },
  create: async ({ config, deps, logger }) => {
    const tpm = new Tpm(config.tcti);
    // Start-up fails here, naming the PCRs that changed, rather than run with a weaker key.
    const sealed = await unsealKeys(tpm, config.sealedDir);
    for (const key of sealed.values())
      for (const encoding of ['hex', 'base64', 'base64url'] as const)
        deps.secrets.add(Buffer.from(key).toString(encoding));
    logger.info(
      { sealedDir: config.sealedDir, tcti: config.tcti, keys: SEALED_PURPOSES },
      'tee-vtpm: the sealed keys unsealed',
    );
    const quoter = new Quoter(tpm, config);
    const status = { teeEnabled: true, platform: VTPM_PLATFORM, keySource: 'sealed' as const };
    return {
      specVersion: 'v2' as const,
      platform: VTPM_PLATFORM,
      offlineVerifier: OFFLINE_VERIFIER,
      status: () => Promise.resolve({ ...status }),
      attest: (reportData) => quoter.attest(reportData),
      signingKey: (purpose) => Promise.resolve({ key: keyFor(sealed, purpose), source: 'sealed' as const }),
      verify: (evidence, expected) =>
        evidence.platform === VTPM_PLATFORM
          ? Promise.resolve(
              verifyVtpmEvidence(evidence, expected, { trustedAkFingerprints: config.trustedAkFingerprints }),
            )
          : Promise.reject(
              new SigilError('invalid_request', `tee-vtpm verifies no ${evidence.platform} evidence`, {
                details: { reason: 'platform_mismatch' },
              }),
            ),
    };
  },
});
