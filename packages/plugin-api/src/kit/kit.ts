import { type PluginInstanceOf, type PluginKind, type PluginLifecycle, type SpecVersion } from '../index.ts';
import { ensure, failWith, pass, type Check } from './check.ts';
import type { EvidenceLog } from './evidence.ts';

/**
 * A contract kit: the checks an instance of one plugin kind must pass, taken from the doc comments of
 * its contract in packages/plugin-api/src/contracts/. The CLI (`sigil conformance plugin`) and mocha
 * (`describe<Kind>Kit`) run the very same list.
 */

/** What a plugin check sees: only its evidence log; instances come from the check's own `load`. */
export interface KitContext {
  evidence: EvidenceLog;
}

export type KitCheck = Check<KitContext>;

/** A behavioural check, given a fresh instance of the contract. */
export type InstanceCheck<Instance> = Check<KitContext & { instance: Instance }>;

/** A member's `typeof`; with `?`, the member is optional (absent, or of that type). */
export type MemberType = 'function' | 'string' | 'boolean' | 'object' | 'function?' | 'string?' | 'boolean?';

/**
 * Every member of a contract but `specVersion`, with the type it must have. Being a mapped type, it
 * makes the compiler refuse a kit that forgets a member the contract gains.
 */
export type ContractMembers<Instance> = {
  readonly [M in Exclude<keyof Instance, 'specVersion'>]-?: MemberType;
};

/** The kit of one spec version of a kind's contract (a kind with two versions has a kit for each). */
export interface ContractKit<K extends PluginKind, V extends SpecVersion<K> = SpecVersion<K>> {
  kind: K;
  /** The contract version the kit checks: an instance must carry it as its `specVersion`. */
  specVersion: V;
  /** The contract's source, quoted in each check's `spec`. */
  contractFile: string;
  members: ContractMembers<PluginInstanceOf<K, V>>;
  /** Behavioural checks from the contract's doc comments. */
  behaviour: readonly InstanceCheck<PluginInstanceOf<K, V>>[];
}

/** Returns a fresh, started instance per call; the kit stops it after the check when it has `stop`. */
export type LoadInstance = () => Promise<unknown>;

/**
 * The checks of a kit bound to a way of getting instances: the shape of the instance (the kit's spec
 * version, every member of that version), then the kit's behaviour.
 */
export function contractChecks<K extends PluginKind, V extends SpecVersion<K>>(
  kit: ContractKit<K, V>,
  load: LoadInstance,
): KitCheck[] {
  const spec = (detail: string) => `${kit.contractFile}: ${detail}`;
  const shape: InstanceCheck<Record<string, unknown>>[] = [
    {
      id: `${kit.kind}.spec-version`,
      level: 'MUST',
      title: `The instance carries the specVersion of the contract (${kit.specVersion})`,
      spec: spec(
        `specVersion, "The version of this contract the instance implements: its manifest's specVersion"`,
      ),
      check: async ({ instance }) => {
        const version = instance.specVersion;
        ensure(typeof version === 'string', 'the instance has no specVersion string');
        ensure(
          version === kit.specVersion,
          `the instance says specVersion "${version}", the contract is ${kit.specVersion}`,
        );
        return pass();
      },
    },
    {
      id: `${kit.kind}.members`,
      level: 'MUST',
      title: `The instance has every member of the ${kit.kind} contract`,
      spec: spec(Object.keys(kit.members).join(', ')),
      check: async ({ instance }) => {
        const problems = Object.entries(kit.members as Record<string, MemberType>)
          .filter(([name, type]) => !memberMatches(typeof instance[name], type))
          .map(([name, type]) => `${name} is ${typeof instance[name]}, expected ${type}`);
        ensure(problems.length === 0, problems.join('; '));
        return pass();
      },
    },
  ];
  // Behaviour is typed against the contract; the members check above is what tells whether it holds.
  const behaviour = kit.behaviour as readonly InstanceCheck<unknown>[];
  return [...(shape as InstanceCheck<unknown>[]), ...behaviour].map((check) => onFreshInstance(check, load));
}

/** Runs a check on an instance of its own, so checks cannot leak state into each other. */
function onFreshInstance(check: InstanceCheck<unknown>, load: LoadInstance): KitCheck {
  return {
    id: check.id,
    level: check.level,
    title: check.title,
    spec: check.spec,
    check: async (context) => {
      let instance: unknown;
      try {
        instance = await load();
      } catch (err) {
        failWith(`cannot create an instance: ${err instanceof Error ? err.message : String(err)}`);
      }
      ensure(typeof instance === 'object' && instance !== null, 'the factory did not return an object');
      try {
        return await check.check({ ...context, instance });
      } finally {
        await (instance as PluginLifecycle).stop?.();
      }
    },
  };
}

const memberMatches = (actual: string, expected: MemberType): boolean =>
  expected.endsWith('?') ? actual === 'undefined' || actual === expected.slice(0, -1) : actual === expected;
