import { z } from 'zod';
import { definePlugin } from '../../core/plugins/manifest.ts';

/**
 * The honest default: no TEE. It attests nothing and says so, so a deployment without confidential
 * hardware is reported as such instead of pretending.
 */
export default definePlugin({
  kind: 'tee-backend',
  name: 'tee-none',
  specVersion: 'v1',
  description: 'No trusted execution environment; keys come from config',
  config: z.object({}).strict(),
  create: () => ({
    specVersion: 'v1' as const,
    platform: 'none',
    status: () => Promise.resolve({ teeEnabled: false, platform: 'none', keySource: 'config' as const }),
    attest: () => Promise.resolve(undefined),
  }),
});
