import * as pep440 from '@renovatebot/pep440';
import semver from 'semver';
import { z } from 'zod';
import { ensure, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import {
  findServableServer,
  path,
  readServer,
  readServers,
  TIERS,
  type ServerCondition,
  type ServerView,
} from './catalog.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectJson } from './expect.ts';
import {
  dotted,
  findField,
  isObject,
  normalized,
  PROOF_FIELDS,
  provenSmokeCalls,
  type Found,
} from './proofs.ts';

/**
 * The registry kinds of the gateway's MCP servers (gateway spec part 2: a server's registry kind is a
 * Node.js package registry, a Python package registry, a container image registry or a Git
 * repository; an execution proof holds the server package and its registry digest). For each kind a
 * deployment lists, its verified servers are pinned exactly (a version and a digest of the kind's
 * form) and a tool call's proof names that pin. A kind the deployment lists no server of does not
 * apply. The details are read leniently (the spec leaves REST bodies open): the kind from `registry`
 * (Sigil's), `registryKind` or `registry.kind`, the pin from `version` and `digest`.
 */

const SPEC_KINDS =
  'gateway spec part 2, MCP server: "registry kind one of: Node.js package registry, Python package registry, container image registry, Git repository"';
const SPEC_PROOF_PIN =
  'gateway spec part 2, Execution proof: "server package and registry digest"; MCP server: a registry kind. A package is named exactly by its registry, name and version, and the digest pins its content';

/** What the runner knows of one registry kind the spec names. */
interface RegistryKind {
  /** The id's suffix, and Sigil's name of the kind. */
  name: 'npm' | 'pypi' | 'oci' | 'git';
  /** As the spec names it. */
  spec: string;
  /** What deployments call it, lower case (Sigil: the first). */
  aliases: readonly string[];
  /** The form of an exact digest, for reasons. */
  digestForm: string;
  digest: RegExp;
  /** Why `version` is not an exact version of this kind (given its digest), or undefined. */
  versionProblem(version: string, digest: string): string | undefined;
}

const OBJECT_ID = '(?:[0-9a-f]{40}|[0-9a-f]{64})';
const GIT_DIGEST = new RegExp(`^git:(${OBJECT_ID});tree:(${OBJECT_ID})$`);
/** A tag as the OCI distribution spec allows it. */
const OCI_TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const SHA256 = /^sha256:[0-9a-f]{64}$/;

const REGISTRY_KINDS: readonly RegistryKind[] = [
  {
    name: 'npm',
    spec: 'Node.js package registry',
    aliases: ['npm', 'node', 'nodejs', 'node.js'],
    digestForm: 'sha512-<base64 of 64 bytes> (an SRI sha512 integrity)',
    digest: /^sha512-[A-Za-z0-9+/]{86}==$/,
    versionProblem: (version) =>
      semver.valid(version) === version ? undefined : 'is not an exact semver version (a range or a tag?)',
  },
  {
    name: 'pypi',
    spec: 'Python package registry',
    aliases: ['pypi', 'python', 'pip'],
    digestForm: 'sha256:<64 hex> (of the wheel)',
    digest: SHA256,
    versionProblem: (version) =>
      pep440.valid(version) === null ? 'is not an exact PEP 440 version (a specifier?)' : undefined,
  },
  {
    name: 'oci',
    spec: 'container image registry',
    aliases: ['oci', 'docker', 'container', 'image'],
    digestForm: 'sha256:<64 hex> (of the image manifest)',
    digest: SHA256,
    versionProblem: (version) =>
      OCI_TAG.test(version) || SHA256.test(version) ? undefined : 'is neither an image tag nor a digest',
  },
  {
    name: 'git',
    spec: 'Git repository',
    aliases: ['git'],
    digestForm: 'git:<commit id>;tree:<tree id> (full hex object ids)',
    digest: GIT_DIGEST,
    versionProblem: (version, digest) => {
      if (!/^\S+$/.test(version)) return 'is not a tag or a commit id';
      const commit = GIT_DIGEST.exec(digest)?.[1];
      // A version that is a commit id names what is pinned; another commit would be another pin.
      return new RegExp(`^${OBJECT_ID}$`).test(version) && commit !== undefined && version !== commit
        ? `is a commit id other than the digest's commit ${commit}`
        : undefined;
    },
  },
];

/** The spec's kind a registry name means, or undefined for a kind of the deployment's own. */
const kindNamed = (label: string): RegistryKind | undefined =>
  REGISTRY_KINDS.find((kind) => kind.aliases.includes(label.toLowerCase()));

/** A group of servers by registry kind: one of the spec's four, or every kind beyond them. */
interface KindGroup {
  /** The id's suffix. */
  name: RegistryKind['name'] | 'other';
  /** For reasons: "the Python package registry (pypi)". */
  what: string;
  /** Whether a server's registry kind (as its details name it) is in this group. */
  holds(label: string): boolean;
  /** What a verified server shows, for titles: "an exact version and a digest of the form …". */
  pin: string;
  /** Why a verified server's version and digest are no exact pin of this group, each a phrase. */
  pinProblems(version: string, digest: string): string[];
}

const groupOf = (kind: RegistryKind): KindGroup => ({
  name: kind.name,
  what: `the ${kind.spec} (${kind.name})`,
  holds: (label) => kindNamed(label) === kind,
  pin: `an exact version and a digest of the form ${kind.digestForm}`,
  pinProblems: (version, digest) => {
    const problems: string[] = [];
    if (!kind.digest.test(digest))
      problems.push(`digest ${JSON.stringify(digest)} is not ${kind.digestForm}`);
    const versionProblem = kind.versionProblem(version, digest);
    if (versionProblem !== undefined) problems.push(`version ${JSON.stringify(version)} ${versionProblem}`);
    return problems;
  },
});

const OTHER: KindGroup = {
  name: 'other',
  what: 'a registry kind other than the four the spec names',
  holds: (label) => kindNamed(label) === undefined,
  pin: 'a non-empty version and digest',
  // The runner knows no form of a kind it has never heard of: a pin is there, or it is not.
  pinProblems: () => [],
};

const GROUPS: readonly KindGroup[] = [...REGISTRY_KINDS.map(groupOf), OTHER];

const firstString = (details: Record<string, unknown>, keys: readonly string[]): string | undefined =>
  keys.map((key) => details[key]).find((value): value is string => typeof value === 'string' && value !== '');

/** The exact version a server runs: a resolved one where the details tell it from the range asked for. */
const versionOf = (view: ServerView) =>
  firstString(view.details, ['resolvedVersion', 'pinnedVersion', 'version']);
const digestOf = (view: ServerView) => firstString(view.details, ['digest', 'registryDigest', 'integrity']);
const packageOf = (view: ServerView) => firstString(view.details, ['package', 'packageName']);

const isVerified = (view: ServerView): boolean => (TIERS as readonly unknown[]).includes(view.tier);

const kindsListed = (views: readonly ServerView[]): string => {
  const labels = [...new Set(views.map((view) => view.registry).filter((label) => label !== undefined))];
  const unnamed = views.filter((view) => view.registry === undefined).length;
  return [
    labels.length > 0 ? `kinds ${labels.join(', ')}` : 'no registry kind',
    ...(unnamed > 0 ? [`${unnamed} server(s) naming none`] : []),
  ].join(', ');
};

const inGroup = (group: KindGroup, view: ServerView): boolean =>
  view.registry !== undefined && group.holds(view.registry);

/** The servers of a group, or not applicable when the gateway lists none. */
async function serversOf(context: DeploymentContext, group: KindGroup): Promise<ServerView[]> {
  const views = await readServers(context);
  const held = views.filter((view) => inGroup(group, view));
  if (held.length === 0)
    notApplicableBecause(
      `GET ${path.servers} lists no server of ${group.what} (it lists ${kindsListed(views)})`,
    );
  return held;
}

const conditionOf = (group: KindGroup): ServerCondition => ({
  wanted: `of ${group.what}`,
  unfit: (view) => (inGroup(group, view) ? undefined : `registry kind ${view.registry ?? 'not shown'}`),
});

function pinRequirement(group: KindGroup): Requirement {
  return {
    id: `GW-2.registry-pin-${group.name}`,
    level: 'MUST',
    title: `Every verified server of ${group.what} shows its pin: ${group.pin}`,
    spec: `${SPEC_KINDS}; part 3: "package pulled from its registry" before it runs; part 2, Execution proof: the registry digest`,
    service: 'gateway',
    check: async (context) => {
      let verified = (await serversOf(context, group)).filter(isVerified);
      if (verified.length === 0) {
        // None verified yet: verify one on demand, as a client's first call would.
        const { view } = await findServableServer(context, {
          needSmokeTool: false,
          where: conditionOf(group),
        });
        verified = [await readServer(context, view.id)];
      }
      const problems: string[] = [];
      for (const view of verified) {
        const version = versionOf(view);
        const digest = digestOf(view);
        const where = `${view.id} (${view.registry}, tier ${view.tier}) at GET ${path.server(view.id)}`;
        if (version === undefined || digest === undefined) {
          problems.push(`${where} shows no ${version === undefined ? 'version' : 'digest'}`);
          continue;
        }
        problems.push(...group.pinProblems(version, digest).map((problem) => `${where}: ${problem}`));
        context.evidence.note(`${view.id}: version ${version}, digest ${digest}`);
      }
      ensure(problems.length === 0, problems.join('; '));
      return pass();
    },
  };
}

/** The parts of a proof that name the server's pin, found beside its package. */
interface ProofPin {
  package: Found | undefined;
  version: Found | undefined;
  registry: Found | undefined;
  digest: Found | undefined;
}

const VERSION_KEYS = ['packageversion', 'serverversion', 'resolvedversion', 'version'];
const REGISTRY_KEYS = ['registry', 'registrykind', 'kind'];

/**
 * The package a proof names and the version, registry and digest beside it: in the package's own
 * object (`package: {name, version, …}`) or the one holding it (Sigil's `server`), whose `version` is
 * the package's and not the proof format's. The digest is the shallowest one when none is beside it.
 */
function proofPinOf(proof: Record<string, unknown>): ProofPin {
  const found = findField(proof, 'package');
  if (found === undefined)
    return { package: undefined, version: undefined, registry: undefined, digest: undefined };
  const own = isObject(found.value);
  const at = own ? found.path : found.path.slice(0, -1);
  let holder: unknown = proof;
  for (const segment of at) holder = (holder as Record<string, unknown>)[segment];
  const entries = Object.entries(holder as Record<string, unknown>);
  // In the order of `keys`: a `packageVersion` beside a proof-format `version` is the package's.
  const beside = (keys: readonly (string | RegExp)[]): Found | undefined => {
    for (const wanted of keys) {
      const entry = entries.find(([key]) =>
        typeof wanted === 'string' ? normalized(key) === wanted : wanted.test(normalized(key)),
      );
      if (entry) return { path: [...at, entry[0]], value: entry[1] };
    }
    return undefined;
  };
  return {
    package: own ? beside(['name', 'packagename']) : found,
    version: beside(VERSION_KEYS),
    registry: beside(REGISTRY_KEYS),
    digest: beside([PROOF_FIELDS.digest.key]) ?? findField(proof, 'digest'),
  };
}

/** Registry names agree when equal or when both mean the same kind of the spec's. */
const sameRegistry = (a: string, b: string): boolean =>
  a === b || (kindNamed(a) !== undefined && kindNamed(a) === kindNamed(b));

function proofPinRequirement(group: KindGroup): Requirement {
  return {
    id: `GW-2.proof-pin-${group.name}`,
    level: 'MUST',
    title: `A tool call of a server of ${group.what}, over MCP and over REST, carries a proof naming the package, version, registry and digest its details show`,
    spec: SPEC_PROOF_PIN,
    service: 'gateway',
    check: async (context) => {
      await serversOf(context, group);
      const { server, mcp, rest } = await provenSmokeCalls(context, conditionOf(group));
      const view = server.view;
      const shown = {
        package: packageOf(view),
        version: versionOf(view),
        registry: view.registry,
        digest: digestOf(view),
      };
      const details = `GET ${path.server(view.id)}`;
      ensure(
        shown.version !== undefined && shown.digest !== undefined,
        `${details} shows no ${shown.version === undefined ? 'version' : 'digest'} to compare the proof with`,
      );
      const problems: string[] = [];
      for (const call of [mcp, rest]) {
        const pin = proofPinOf(call.proof);
        for (const part of ['package', 'version', 'registry', 'digest'] as const) {
          const expected = shown[part];
          const found = pin[part];
          if (expected === undefined) continue;
          if (found === undefined) {
            problems.push(
              `the proof of ${call.where} names no ${part}${part === 'package' ? '' : ' beside the server package'}`,
            );
            continue;
          }
          const agrees =
            typeof found.value === 'string' &&
            (part === 'registry' ? sameRegistry(found.value, expected) : found.value === expected);
          if (!agrees) {
            problems.push(
              `the proof of ${call.where} names ${part} ${JSON.stringify(found.value)} (${dotted(found.path)}), but ${details} shows ${JSON.stringify(expected)}`,
            );
          }
        }
      }
      ensure(problems.length === 0, problems.join('; '));
      context.evidence.note(`${view.id}'s pin, as its details and both proofs name it`, shown);
      return pass();
    },
  };
}

const jsonObject = z.record(z.string(), z.unknown());

/** `registry`, `registryKind` or `kind` of a cache, split where one cache serves several kinds ("npm, git"). */
function cacheKinds(cache: Record<string, unknown>): string[] {
  const named = [cache.registry, cache.registryKind, cache.kind].find((value) => typeof value === 'string');
  return typeof named === 'string' ? named.split(/[\s,]+/).filter((label) => label !== '') : [];
}

/** The first list in the status whose items are caches naming their registry (Sigil's `caches`). */
function cachesIn(status: Record<string, unknown>): Record<string, unknown>[] | undefined {
  const lists = [status.caches, ...Object.values(status)].filter(Array.isArray);
  return lists.find((list) => list.some((item) => isObject(item) && cacheKinds(item).length > 0)) as
    Record<string, unknown>[] | undefined;
}

const warmupCacheRequirement: Requirement = {
  id: 'GW-4.warmup-cache-per-kind',
  level: 'SHOULD',
  title:
    'GET /api/warmup/status shows a package cache for each registry kind GET /api/servers lists, holding each verified server’s pinned digest',
  spec: `gateway spec part 4, REST endpoints: GET /api/warmup/status, "package cache status"; ${SPEC_KINDS}. The spec does not say the status is per kind, but servers of each kind come from their own registry's cache`,
  service: 'gateway',
  check: async (context) => {
    const views = (await readServers(context)).filter((view) => view.registry !== undefined);
    if (views.length === 0) notApplicableBecause(`no server at GET ${path.servers} names its registry kind`);
    const response = await context.http.request({ service: 'gateway', path: '/api/warmup/status' });
    const status = expectJson(response, 200, jsonObject, 'GET /api/warmup/status');
    const caches = cachesIn(status);
    ensure(
      caches !== undefined,
      'GET /api/warmup/status shows no cache per registry (looked for a list of objects naming their `registry`, `registryKind` or `kind`)',
    );
    const problems: string[] = [];
    for (const label of new Set(views.map((view) => view.registry as string))) {
      const cache = caches.find((item) => cacheKinds(item).some((kind) => sameRegistry(kind, label)));
      if (cache === undefined) {
        problems.push(
          `no cache of registry kind ${label} (caches of ${caches.flatMap(cacheKinds).join(', ')})`,
        );
        continue;
      }
      // Entries are optional; where the cache lists them, each verified server's pin is among them.
      if (!Array.isArray(cache.entries)) continue;
      const digests = new Set(cache.entries.filter(isObject).map((entry) => entry.digest));
      for (const view of views.filter((view) => view.registry === label && isVerified(view))) {
        const digest = digestOf(view);
        if (digest !== undefined && !digests.has(digest))
          problems.push(`the ${label} cache holds no entry with ${view.id}'s pinned digest ${digest}`);
      }
    }
    ensure(problems.length === 0, `GET /api/warmup/status: ${problems.join('; ')}`);
    return pass();
  },
};

export const registryRequirements: readonly Requirement[] = [
  ...GROUPS.map(pinRequirement),
  ...GROUPS.map(proofPinRequirement),
  warmupCacheRequirement,
];
