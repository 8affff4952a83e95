/**
 * The contract-test kits of Sigil's plugin API (`@sigil/plugin-api/kit`): the checks a plugin of each
 * kind must pass, taken from the doc comments of its contract, for a plugin's own test suite (mocha) and
 * for `sigil conformance plugin`. Needs mocha for the `describe…` functions, zod, and, for a plugin that
 * depends on `coreServices.db`, knex and sqlite3 (or a database given in `services`).
 */

/** A whole plugin module: its manifest, then the contract kit of its kind on instances of its factory. */
export {
  describePluginKit,
  pluginKitChecks,
  pluginLoader,
  pluginName,
  type PluginKitOptions,
} from './plugin-kit.ts';
export { manifestChecks, manifestOf, type PluginUnderTest, type UncheckedManifest } from './manifest.ts';
export { KitServices } from './services.ts';

/** The contract kit of each kind, on instances made by the caller. */
export { describeContractKit, KIT_CHECK_TIMEOUT_MS, registerChecks, type RegisterOptions } from './mocha.ts';
export {
  contractChecks,
  type ContractKit,
  type ContractMembers,
  type InstanceCheck,
  type KitCheck,
  type KitContext,
  type LoadInstance,
  type MemberType,
} from './kit.ts';
export { CONTRACT_KITS, latestKit } from './contract-kits.ts';
export {
  canvasNodeKit,
  canvasNodeKitV2,
  describeCanvasNodeKit,
  describeCanvasNodeKitV2,
} from './canvas-node.ts';
export {
  approvedDecision,
  canvasTestContext,
  type CanvasTestContextOptions,
  type CanvasTestRecord,
} from './canvas-node-context.ts';
export { describeLlmProviderKit, llmProviderKit } from './llm-provider.ts';
export {
  describePackageRegistryKit,
  describePackageRegistryKitV2,
  packageRegistryKit,
  packageRegistryKitV2,
} from './package-registry.ts';
export { describePaymentRailKit, paymentRailKit } from './payment-rail.ts';
export {
  describeSandboxRuntimeKit,
  describeSandboxRuntimeKitV2,
  sandboxRuntimeKit,
  sandboxRuntimeKitV2,
} from './sandbox-runtime.ts';
export {
  describeTeeBackendKit,
  describeTeeBackendKitV2,
  teeBackendKit,
  teeBackendKitV2,
} from './tee-backend.ts';

/** Behaviour that needs what only the tester has: an upstream and keys, a funded payer, served packages. */
export {
  describeLlmProviderBehaviour,
  llmProviderBehaviour,
  type LlmProviderHarness,
} from './llm-provider-behaviour.ts';
export {
  describePackageRegistryBehaviour,
  packageRegistryBehaviour,
  type PackageRegistryFixture,
} from './package-registry-behaviour.ts';
export {
  describePackageRegistryBehaviourV2,
  packageRegistryBehaviourV2,
  type PackageRegistryFixtureV2,
  type PackageRegistryTraits,
} from './package-registry-behaviour-v2.ts';
export {
  describePaymentRailBehaviour,
  paymentRailBehaviour,
  type PaymentRailHarness,
} from './payment-rail-behaviour.ts';
export { probeReadOnlyPaths, SANDBOX_PROBE_FILE, writableMounts } from './sandbox-runtime-behaviour.ts';

/** Checks and how they run: outcomes, evidence, redaction of everything recorded. */
export {
  ensure,
  expectShape,
  fail,
  failWith,
  notApplicable,
  notApplicableBecause,
  OutcomeSignal,
  pass,
  runChecks,
  type Check,
  type CheckInfo,
  type CheckResult,
  type Level,
  type Outcome,
  type RunChecksOptions,
  type Status,
} from './check.ts';
export {
  describeEvidence,
  EvidenceLog,
  excerpt,
  type Evidence,
  type HttpEvidence,
  type NoteEvidence,
} from './evidence.ts';
export { EvidenceRedactor, isSecretName, redactSecrets, redactValue } from './redact.ts';

/** x402 v2 objects a payment rail hands out. */
export {
  caip2,
  sameAddress,
  x402PaymentRequiredSchema,
  x402RequirementsSchema,
  type X402PaymentRequiredWire,
  type X402Requirements,
} from './x402.ts';
