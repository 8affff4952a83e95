import type { BuiltinPlugins } from '../core/plugins/host.ts';

/** Plugins shipped with Sigil, by the name used in `plugins[].resolve`. */
export const builtinPlugins: BuiltinPlugins = {
  'tee-none': () => import('../attestation/none/index.ts'),
  'tee-sev-snp': () => import('../attestation/sev-snp/index.ts'),
  'tee-tdx': () => import('../attestation/tdx/index.ts'),
  'tee-vtpm': () => import('../attestation/vtpm/index.ts'),
  'registry-npm': () => import('../registries/npm/index.ts'),
  'registry-git': () => import('../registries/git/index.ts'),
  'registry-pypi': () => import('../registries/pypi/index.ts'),
  'registry-oci': () => import('../registries/oci/index.ts'),
  'sandbox-linux-namespaces': () => import('../plugins/sandboxes/linux-namespaces/index.ts'),
  'sandbox-docker': () => import('../plugins/sandboxes/docker/index.ts'),
  'payments-x402-evm': () => import('../plugins/payments/x402-evm/index.ts'),
  'canvas-chromium': () => import('../plugins/canvas/chromium/index.ts'),
  'canvas-transform': () => import('../plugins/canvas/transform/index.ts'),
  'provider-openai-compatible': () => import('../providers/openai-compatible/index.ts'),
  'provider-anthropic': () => import('../providers/anthropic/index.ts'),
  'provider-local': () => import('../providers/local/index.ts'),
  'canvas-approval': () => import('../plugins/canvas/approval/index.ts'),
  'canvas-workspace': () => import('../plugins/canvas/workspace/index.ts'),
  'canvas-git': () => import('../plugins/canvas/git/index.ts'),
  'canvas-github': () => import('../plugins/canvas/github/index.ts'),
  'canvas-llm': () => import('../plugins/canvas/llm/index.ts'),
  'canvas-gateway': () => import('../plugins/canvas/gateway/index.ts'),
  'canvas-team': () => import('../plugins/canvas/team/index.ts'),
};
