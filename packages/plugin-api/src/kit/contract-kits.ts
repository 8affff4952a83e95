import { type PluginKind, type SpecVersion, SUPPORTED_SPEC_VERSIONS } from '../index.ts';
import { canvasNodeKit, canvasNodeKitV2 } from './canvas-node.ts';
import type { ContractKit } from './kit.ts';
import { llmProviderKit } from './llm-provider.ts';
import { packageRegistryKit, packageRegistryKitV2 } from './package-registry.ts';
import { paymentRailKit } from './payment-rail.ts';
import { sandboxRuntimeKit, sandboxRuntimeKitV2 } from './sandbox-runtime.ts';
import { teeBackendKit, teeBackendKitV2 } from './tee-backend.ts';

/**
 * One kit per plugin kind and spec version; the mapped type makes a new kind or version in the
 * contracts fail to compile here.
 */
export const CONTRACT_KITS: {
  readonly [K in PluginKind]: { readonly [V in SpecVersion<K>]: ContractKit<K, V> };
} = {
  'llm-provider': { v1: llmProviderKit },
  'package-registry': { v1: packageRegistryKit, v2: packageRegistryKitV2 },
  'payment-rail': { v1: paymentRailKit },
  'sandbox-runtime': { v1: sandboxRuntimeKit, v2: sandboxRuntimeKitV2 },
  'tee-backend': { v1: teeBackendKit, v2: teeBackendKitV2 },
  'canvas-node': { v1: canvasNodeKit, v2: canvasNodeKitV2 },
};

/** The kit of a kind's newest spec version: the one new plugins implement and the docs describe. */
export function latestKit<K extends PluginKind>(kind: K): ContractKit<K> {
  const versions = CONTRACT_KITS[kind] as Readonly<Record<string, ContractKit<K>>>;
  // SUPPORTED_SPEC_VERSIONS lists each kind's versions oldest first.
  return versions[SUPPORTED_SPEC_VERSIONS[kind].at(-1) as string] as ContractKit<K>;
}
