import { hkdfSync, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { coreServices, definePlugin, SigilError } from '@sigil/plugin-api';

/**
 * The honest default: no TEE. It attests nothing and says so, so a deployment without confidential
 * hardware is reported as such instead of pretending. Its keys come from `keyMaterial` in its config;
 * without it they are random per process (proofs then verify only until a restart, on this replica).
 */
export default definePlugin({
  kind: 'tee-backend',
  name: 'tee-none',
  specVersion: 'v2',
  description: 'No trusted execution environment; keys come from config',
  config: z
    .object({
      keyMaterial: z
        .string()
        .min(32, 'at least 32 characters of secret material')
        .optional()
        .describe(
          'Secret that keys (e.g. the execution-proof HMAC key) are derived from; the same value on every replica, required where replicas share the database (e.g. openssl rand -base64 48)',
        ),
    })
    .strict(),
  dependencies: { secrets: coreServices.secrets },
  create: ({ config, deps, logger }) => {
    const material = config.keyMaterial;
    const keySource = material === undefined ? ('ephemeral' as const) : ('config' as const);
    if (material === undefined) {
      logger.warn(
        'tee-none: no keyMaterial configured; keys are random per process (execution proofs verify until restart)',
      );
    } else {
      deps.secrets.add(material);
    }
    const ephemeral = new Map<string, Uint8Array>();
    return {
      specVersion: 'v2' as const,
      platform: 'none',
      status: () => Promise.resolve({ teeEnabled: false, platform: 'none', keySource }),
      attest: () => Promise.resolve(undefined),
      signingKey: (purpose: string) => {
        let key: Uint8Array | undefined = material === undefined ? ephemeral.get(purpose) : undefined;
        if (material !== undefined) {
          key = new Uint8Array(hkdfSync('sha256', material, 'sigil:tee-none', `sigil:${purpose}`, 32));
        } else if (key === undefined) {
          key = new Uint8Array(randomBytes(32));
          ephemeral.set(purpose, key);
        }
        return Promise.resolve({ key, source: keySource });
      },
      // No hardware, so no evidence of its own to judge: whatever claims to be `none` proves nothing.
      verify: (evidence) =>
        evidence.platform === 'none'
          ? Promise.resolve({
              platform: 'none',
              verified: false,
              checks: [
                {
                  id: 'evidence',
                  ok: false,
                  detail: 'platform none attests nothing: no evidence can verify',
                },
              ],
            })
          : Promise.reject(
              new SigilError('invalid_request', `tee-none verifies no ${evidence.platform} evidence`, {
                details: { reason: 'platform_mismatch' },
              }),
            ),
    };
  },
});
