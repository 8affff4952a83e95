import type { PluginInstanceOf, PluginKind, SpecVersion } from '../index.ts';
import { runChecks } from './check.ts';
import { EvidenceRedactor } from './redact.ts';
import { contractChecks, type ContractKit, type InstanceCheck, type KitCheck } from './kit.ts';

/**
 * Kits as mocha suites, for plugin authors' own test runs. Each check is one test: a pass passes, a
 * failure throws its reason and the contract text it checks, a check that does not apply is skipped. Titles carry the level, so
 * `mocha --grep "(MUST)"` runs only what the CLI's exit code depends on.
 */

/** Longest one plugin check may take; a hung call fails the check instead of the suite. */
export const KIT_CHECK_TIMEOUT_MS = 15_000;

export interface RegisterOptions {
  /**
   * Checks known not to apply to the plugin under test (e.g. TEE checks on `none`): each becomes a test
   * that passes only when the check indeed reports not-applicable, so nothing is left skipped.
   */
  expectNotApplicable?: readonly string[];
  /** What the checks' evidence and reasons are redacted with (the plugin's secrets); a fresh one by default. */
  redactor?: EvidenceRedactor;
}

export function registerChecks(checks: readonly KitCheck[], options: RegisterOptions = {}): void {
  const expected = new Set(options.expectNotApplicable ?? []);
  const redactor = options.redactor ?? new EvidenceRedactor();
  for (const check of checks) {
    it(`${check.id} (${check.level}): ${check.title}`, async function () {
      this.timeout(KIT_CHECK_TIMEOUT_MS + 1_000);
      const [result] = await runChecks([check], {
        redactor,
        timeoutMs: KIT_CHECK_TIMEOUT_MS,
        contextFor: (evidence) => ({ evidence }),
      });
      if (expected.has(check.id)) {
        if (result?.status !== 'not-applicable')
          throw new Error(`${check.id}: expected not-applicable, got ${result?.status ?? 'nothing'}`);
        return;
      }
      if (result?.status === 'not-applicable') this.skip();
      if (result?.status === 'fail')
        throw new Error(`${check.id}: ${result.reason ?? 'failed'}\n  checks: ${check.spec}`);
    });
  }
}

/** The contract kit of one kind against instances from `load` (fresh and started on each call). */
export function describeContractKit<K extends PluginKind>(
  kit: ContractKit<K>,
  load: () => Promise<PluginInstanceOf<K>>,
  options: RegisterOptions = {},
): void {
  describe(`${kit.kind} contract kit`, () => registerChecks(contractChecks(kit, load), options));
}

/**
 * A kit and the behavioural checks that need what the tester gives (an upstream, a registry, a payer)
 * as mocha tests, against instances from `load` (fresh and started on each call).
 */
export function describeKitWithBehaviour<K extends PluginKind, V extends SpecVersion<K>>(
  kit: ContractKit<K, V>,
  behaviour: readonly InstanceCheck<PluginInstanceOf<K, V>>[],
  load: () => Promise<PluginInstanceOf<K, V>>,
): void {
  const withBehaviour = { ...kit, behaviour: [...kit.behaviour, ...behaviour] };
  describe(`${kit.kind} contract kit, with behaviour`, () =>
    registerChecks(contractChecks(withBehaviour, load)));
}
