/**
 * The plugin API of Sigil: the versioned contract of every plugin kind, the manifest a plugin module
 * exports, the references by which it declares what it needs, the extension points it may serve keys
 * of, and the errors it reports. Plugins import only from here and its subpaths (`/kit`, `/llm`, …).
 */
export type * from './contracts/index.ts';
export { PLUGIN_KINDS, SUPPORTED_SPEC_VERSIONS } from './contracts/index.ts';
export type * from './dependencies.ts';
export { coreServices, dependencyRefProblem, pluginOfKind } from './dependencies.ts';
export type * from './errors.ts';
export type { Extension, ExtensionPoint } from './extensions.ts';
export { extensionPoints, provide, providedExtensionProblems, REGISTRY_KIND_RULE } from './extensions.ts';
export {
  isLeaseLost,
  isSigilError,
  leaseLost,
  PACKAGE_REGISTRY_FAILURE_CODES,
  SigilError,
} from './errors.ts';
export { KeptLease } from './kept-lease.ts';
export type * from './llm-errors.ts';
export {
  isLlmProviderError,
  llmErrorKindForStatus,
  LlmProviderError,
  llmProviderError,
  retryAfterMs,
  scrubSecret,
} from './llm-errors.ts';
export type * from './manifest.ts';
export type * from './node-launch.ts';
export { nodeLaunch } from './node-launch.ts';
export { definePlugin } from './manifest.ts';
export { encodingsOf, REDACTED, Redactor } from './redaction.ts';
export type * from './services.ts';
export { CORE_SERVICE_NAMES } from './services.ts';
