import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  extensionPoints,
  type PluginKind,
  type PluginManifest,
  SUPPORTED_SPEC_VERSIONS,
} from '@sigil/plugin-api';
import {
  type CheckInfo,
  latestKit,
  contractChecks,
  llmProviderBehaviour,
  manifestChecks,
  packageRegistryBehaviourV2,
  paymentRailBehaviour,
} from '@sigil/plugin-api/kit';
import { builtinPlugins } from '../services/builtin-plugins.ts';
import { cell } from './config-reference.ts';
import {
  contractInterface,
  type DocumentedInterface,
  interfaceOf,
  memberOf,
  readSourceDocs,
  ROOT,
  type SourceDocs,
} from './contract-source.ts';

/**
 * docs/plugins/<kind>.md: one page per plugin kind, from the doc comments of its contract and of the
 * manifest, the checks of its kits, and its template (templates/plugin/<kind>.ts).
 */

const MANIFEST_FILE = 'packages/plugin-api/src/manifest.ts';

/** Only listed: the docs never run a check, so the harness a behaviour kit reads is never asked for. */
const unused = (): never => {
  throw new Error('the docs list checks without running them');
};

/** Behaviour kits that need what only the plugin's tester has: the function to call, its harness, its checks. */
const BEHAVIOUR_KITS: Partial<
  Record<PluginKind, { describe: string; harness: { file: string; name: string }; checks: CheckInfo[] }>
> = {
  'llm-provider': {
    describe: 'describeLlmProviderBehaviour',
    harness: { file: 'packages/plugin-api/src/kit/llm-provider-behaviour.ts', name: 'LlmProviderHarness' },
    checks: [...llmProviderBehaviour(unused)],
  },
  'package-registry': {
    describe: 'describePackageRegistryBehaviourV2',
    harness: {
      file: 'packages/plugin-api/src/kit/package-registry-behaviour-v2.ts',
      name: 'PackageRegistryFixtureV2',
    },
    checks: [...packageRegistryBehaviourV2(unused)],
  },
  'payment-rail': {
    describe: 'describePaymentRailBehaviour',
    harness: { file: 'packages/plugin-api/src/kit/payment-rail-behaviour.ts', name: 'PaymentRailHarness' },
    checks: [...paymentRailBehaviour(unused)],
  },
};

const code = (text: string): string => `\`\`\`ts\n${text}\n\`\`\``;

/** A doc comment as one list item: its lines joined, its own lists kept on lines of their own. */
const bullet = (name: string, doc: string): string => `- \`${name}\`: ${doc.replace(/\n(?!- )/g, ' ')}`;

/** The built-in plugins of `kind`, by name. */
async function builtinsOf(kind: PluginKind): Promise<string[]> {
  const names: string[] = [];
  for (const load of Object.values(builtinPlugins)) {
    const manifest = ((await load()) as { default: PluginManifest }).default;
    if (manifest.kind === kind) names.push(manifest.name);
  }
  return names.sort();
}

function contractSection(kind: PluginKind, docs: SourceDocs, contract: DocumentedInterface): string {
  const versions = SUPPORTED_SPEC_VERSIONS[kind].map((version) => `\`${version}\``).join(', ');
  const others = docs.declarations.filter((declaration) => declaration.name !== contract.name);
  return [
    '## Contract',
    `\`${contract.name}\` in \`@sigil/plugin-api\` ([source](../../${docs.file})); spec versions this core supports: ${versions}. Each member, and what a conforming plugin does with it:`,
    ...contract.members.flatMap((member) => [`### \`${member.name}\``, code(member.declaration), member.doc]),
    ...(others.length === 0
      ? []
      : [
          '### Types it uses',
          'As declared, doc comments included:',
          code(others.map((d) => d.text).join('\n\n')),
        ]),
  ].join('\n\n');
}

function extensionPointSection(kind: PluginKind): string | undefined {
  const points = Object.entries(extensionPoints).filter(([, point]) => point.kind === kind);
  if (points.length === 0) return undefined;
  return [
    '## Extension points',
    `A ${kind} plugin extends Sigil at these points: its manifest's \`provides\` names the keys it serves, at least one of each. The host refuses to start when two plugins provide the same key, naming both.`,
    ...points.map(([name, point]) =>
      [
        `### \`extensionPoints.${name}\``,
        `\`${point.id}\`, version \`${point.version}\`; a key is a ${point.keyName}. ${point.description}`,
        code(`provides: [provide(extensionPoints.${name}, '<${point.keyName}>')],`),
      ].join('\n\n'),
    ),
  ].join('\n\n');
}

function lifecycleSection(manifest: SourceDocs): string {
  const lifecycle = interfaceOf(manifest, 'PluginLifecycle');
  const context = interfaceOf(manifest, 'PluginContext');
  const create = memberOf(interfaceOf(manifest, 'PluginManifest'), 'create');
  const step = (text: string) => text.replace(/\n(?!- )/g, ' ');
  return [
    '## Lifecycle',
    [
      `1. \`create(context)\`: ${step(create.doc)} ${context.doc.replace(/\.$/, ':')}`,
      ...context.members.map((member) => `   ${bullet(member.name, member.doc)}`),
      ...lifecycle.members.map(
        (member, index) => `${index + 2}. \`${member.name}()\`, optional: ${step(member.doc)}`,
      ),
    ].join('\n'),
    `\`start\` and \`stop\` are \`PluginLifecycle\`: ${step(lifecycle.doc)}`,
  ].join('\n\n');
}

function configSection(manifest: SourceDocs, builtins: readonly string[]): string {
  const fields = interfaceOf(manifest, 'PluginManifest');
  const options =
    builtins.length === 0
      ? 'No built-in plugin is of this kind.'
      : `The options of the built-in ones: ${builtins.map((name) => `[\`${name}\`](../configuration.md#${name})`).join(', ')}.`;
  return [
    '## Manifest and config schema',
    `${fields.doc} Made with \`definePlugin\`, which checks it against the contract at compile time. Its fields:`,
    fields.members
      .filter((member) => member.name !== 'create')
      .map((member) => bullet(member.name, member.doc))
      .join('\n'),
    options,
  ].join('\n\n');
}

function checksTable(checks: readonly CheckInfo[]): string {
  const rows = checks.map(
    (check) =>
      `| ${[`\`${check.id}\``, check.level, check.title, check.spec.replace(/^packages\/\S+?\.ts[,:] /, '')].map(cell).join(' | ')} |`,
  );
  return [
    '| check | level | what it checks | the contract text it checks |',
    '| --- | --- | --- | --- |',
    ...rows,
  ].join('\n');
}

/** Every check the kits of `kind` run, listed (never run): the plugin kit's, and the behaviour kit's. */
export function kitChecks(kind: PluginKind): { plugin: CheckInfo[]; behaviour: CheckInfo[] } {
  return {
    plugin: [
      ...manifestChecks({ exports: undefined, options: {} }),
      ...contractChecks(latestKit(kind), unused),
    ],
    behaviour: BEHAVIOUR_KITS[kind]?.checks ?? [],
  };
}

function kitSection(kind: PluginKind): string {
  const checks = kitChecks(kind);
  const behaviour = BEHAVIOUR_KITS[kind];
  const parts = [
    '## What the kit checks',
    `\`sigil conformance plugin <module>\`, and \`describePluginKit(module, options)\` from \`@sigil/plugin-api/kit\` in the plugin's own mocha suite, run the manifest checks, then the contract checks on fresh instances of its factory. A failed check prints its reason and the text of the contract it checks.`,
    checksTable(checks.plugin),
  ];
  if (behaviour) {
    const harness = readSourceDocs(behaviour.harness.file).declarations.find(
      (declaration) => declaration.name === behaviour.harness.name,
    );
    parts.push(
      `### Behaviour: \`${behaviour.describe}\``,
      `These checks need what only the plugin's tester has, so only its own suite runs them: \`${behaviour.describe}(pluginLoader(manifest, options), harness)\`, with a harness that is read when each check runs:`,
      code(harness?.text ?? behaviour.harness.name),
      checksTable(checks.behaviour),
    );
  }
  return parts.join('\n\n');
}

function exampleSection(kind: PluginKind): string {
  const file = `templates/plugin/${kind}.ts`;
  return [
    '## Example',
    `\`sigil plugin new ${kind} <name>\` starts a package from this manifest and stub ([${file}](../../${file}), type-checked with the repository), naming it throughout; fill in each member until the kit passes.`,
    code(readFileSync(join(ROOT, file), 'utf8').trimEnd()),
  ].join('\n\n');
}

/** The page of one plugin kind, before formatting. */
export async function pluginKindPage(kind: PluginKind): Promise<string> {
  const docs = readSourceDocs(latestKit(kind).contractFile);
  const contract = contractInterface(docs);
  const manifest = readSourceDocs(MANIFEST_FILE);
  const builtins = await builtinsOf(kind);
  const sections = [
    `# \`${kind}\` plugins`,
    `<!-- Generated by \`npm run docs\` (docs/generate.ts) from the doc comments of ${docs.file} and ${MANIFEST_FILE}, the kits and ${`templates/plugin/${kind}.ts`}: edit those, not this file. -->`,
    contract.doc,
    `[All plugin kinds](../plugins.md#plugin-kinds). Built in: ${builtins.length === 0 ? 'none' : builtins.map((name) => `\`${name}\``).join(', ')}.`,
    contractSection(kind, docs, contract),
    extensionPointSection(kind),
    lifecycleSection(manifest),
    configSection(manifest, builtins),
    kitSection(kind),
    exampleSection(kind),
  ];
  return `${sections.filter((section) => section !== undefined).join('\n\n')}\n`;
}
