import type { PluginKind } from '../index.ts';
import { canvasNodeKit } from './canvas-node.ts';
import type { ContractKit } from './kit.ts';
import { llmProviderKit } from './llm-provider.ts';
import { packageRegistryKit } from './package-registry.ts';
import { paymentRailKit } from './payment-rail.ts';
import { sandboxRuntimeKit } from './sandbox-runtime.ts';
import { teeBackendKit } from './tee-backend.ts';

/** One kit per plugin kind; the mapped type makes a new kind in the contracts fail to compile here. */
export const CONTRACT_KITS: { readonly [K in PluginKind]: ContractKit<K> } = {
  'llm-provider': llmProviderKit,
  'package-registry': packageRegistryKit,
  'payment-rail': paymentRailKit,
  'sandbox-runtime': sandboxRuntimeKit,
  'tee-backend': teeBackendKit,
  'canvas-node': canvasNodeKit,
};
