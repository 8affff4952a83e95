import type { CanvasNodeV1 } from './canvas-node-v1.ts';
import type { CanvasNodeV2 } from './canvas-node-v2.ts';
import type { LlmProviderV1 } from './llm-provider-v1.ts';
import type { PackageRegistryV1 } from './package-registry-v1.ts';
import type { PackageRegistryV2 } from './package-registry-v2.ts';
import type { PaymentRailV1 } from './payment-rail-v1.ts';
import type { SandboxRuntimeV1 } from './sandbox-runtime-v1.ts';
import type { SandboxRuntimeV2 } from './sandbox-runtime-v2.ts';
import type { TeeBackendV1 } from './tee-backend-v1.ts';
import type { TeeBackendV2 } from './tee-backend-v2.ts';

export type * from './canvas-node-v1.ts';
export type * from './canvas-node-v2.ts';
export type * from './llm-provider-v1.ts';
export type * from './launch.ts';
export type * from './package-registry-v1.ts';
export type * from './package-registry-v2.ts';
export type * from './payment-rail-v1.ts';
export type * from './sandbox-runtime-v1.ts';
export type * from './sandbox-runtime-v2.ts';
export type * from './tee-backend-v1.ts';
export type * from './tee-backend-v2.ts';

/** Every plugin kind and the contract an instance of each spec version implements. */
export interface PluginContracts {
  'llm-provider': { v1: LlmProviderV1 };
  'package-registry': { v1: PackageRegistryV1; v2: PackageRegistryV2 };
  'payment-rail': { v1: PaymentRailV1 };
  'sandbox-runtime': { v1: SandboxRuntimeV1; v2: SandboxRuntimeV2 };
  'tee-backend': { v1: TeeBackendV1; v2: TeeBackendV2 };
  'canvas-node': { v1: CanvasNodeV1; v2: CanvasNodeV2 };
}

export type PluginKind = keyof PluginContracts;

/**
 * The spec version of each kind that a host hands to its services: the newest. A plugin of an older
 * version it still supports is adapted to this one when it is loaded.
 */
export interface CurrentSpecVersions {
  'llm-provider': 'v1';
  'package-registry': 'v2';
  'payment-rail': 'v1';
  'sandbox-runtime': 'v2';
  'tee-backend': 'v2';
  'canvas-node': 'v2';
}

/** An instance of a kind's current contract: what the host's `all`, `one` and `extensions` give. */
export type CurrentInstanceOf<K extends PluginKind> = PluginContracts[K][CurrentSpecVersions[K] &
  keyof PluginContracts[K]];
export type SpecVersion<K extends PluginKind> = keyof PluginContracts[K] & string;
export type PluginInstanceOf<
  K extends PluginKind,
  V extends SpecVersion<K> = SpecVersion<K>,
> = PluginContracts[K][V];

/** The spec versions this package (and a host built on it) accepts per kind; old versions stay listed while they are supported. */
export const SUPPORTED_SPEC_VERSIONS: { readonly [K in PluginKind]: readonly SpecVersion<K>[] } = {
  'llm-provider': ['v1'],
  'package-registry': ['v1', 'v2'],
  'payment-rail': ['v1'],
  'sandbox-runtime': ['v1', 'v2'],
  'tee-backend': ['v1', 'v2'],
  'canvas-node': ['v1', 'v2'],
};

export const PLUGIN_KINDS = Object.keys(SUPPORTED_SPEC_VERSIONS) as PluginKind[];
