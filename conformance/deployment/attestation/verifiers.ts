import { builtinVerifiers } from '../../../services/shared/offline-verification/builtin-verifiers.ts';

/**
 * The verifiers the runner judges a deployment's evidence with: Sigil's built-in backends' own, under
 * their default policies; a vTPM's attestation key is taken on first use (no tester pins one). The
 * runner cannot judge evidence of any other platform.
 */
export const RUNNER_VERIFIERS: Readonly<Record<string, ReturnType<typeof builtinVerifiers>['vtpm']>> =
  builtinVerifiers();
