import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { PLUGIN_KINDS, type PluginKind, SigilError } from '@sigil/plugin-api';
// The repository's, also when this runs compiled: the templates are read as text, the plugin API packed.
import { REPOSITORY_ROOT } from '../core/layout.ts';

/** The placeholder every template uses for the plugin's name. */
const NAME_TOKEN = 'template-plugin-name';

export interface ScaffoldOptions {
  kind: string;
  /** The plugin's manifest name and its package's name. */
  name: string;
  /** The folder the package folder is made in. */
  parentDir: string;
  /** Progress lines for the terminal. */
  progress?: (line: string) => void;
  /** A tarball of the plugin API packed already (packPluginApi), copied instead of packing again. */
  pluginApiTarball?: string;
}

export interface Scaffolded {
  dir: string;
  files: string[];
}

/**
 * Makes a plugin package of `kind` named `name`: its manifest and a stub of the kind's contract (from
 * templates/plugin/<kind>.ts, which this repository's typecheck compiles), a test that runs the kit,
 * build and test configs, a README, and the plugin API as a tarball in vendor/ (installed by path until
 * it is published). The stub compiles and its kit fails until every member is filled in.
 */
export function scaffoldPlugin(options: ScaffoldOptions): Scaffolded {
  const kind = checkKind(options.kind);
  const name = checkName(options.name);
  const dir = resolve(options.parentDir, name);
  if (existsSync(dir))
    throw new SigilError('conflict', `${dir} already exists; choose another name or folder`);
  const progress = options.progress ?? (() => undefined);
  progress(`creating ${dir}`);
  const keySlot = `${name.replace(/-/g, '_').toUpperCase()}_API_KEY`;
  const named = (text: string) =>
    text.replaceAll('TEMPLATE_PLUGIN_NAME_API_KEY', keySlot).replaceAll(NAME_TOKEN, name);
  const source = named(readFileSync(join(REPOSITORY_ROOT, 'templates', 'plugin', `${kind}.ts`), 'utf8'));
  const vendor = join(dir, 'vendor');
  let tarball: string;
  if (options.pluginApiTarball === undefined) {
    progress('packing the plugin API (@sigil/plugin-api) into vendor/');
    tarball = packPluginApi(vendor);
  } else {
    tarball = basename(options.pluginApiTarball);
    mkdirSync(vendor, { recursive: true });
    copyFileSync(options.pluginApiTarball, join(vendor, tarball));
  }
  const files: Record<string, string> = {
    'package.json': packageJson(name, kind, tarball),
    'tsconfig.json': json(tsconfig({ noEmit: true, include: ['src', 'test'] })),
    'tsconfig.build.json': json(
      tsconfig({ outDir: 'dist', rootDir: 'src', declaration: true, include: ['src'] }),
    ),
    '.mocharc.json': json({ 'node-option': ['import=tsx'], spec: ['test/**/*.test.ts'], timeout: 60_000 }),
    '.gitignore': 'node_modules/\ndist/\n',
    'src/index.ts': source,
    'test/kit.test.ts': named(kitTest(kind)),
    'README.md': readme(name, kind),
  };
  for (const [file, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), content);
  }
  return { dir, files: [...Object.keys(files), `vendor/${tarball}`].sort() };
}

function checkKind(kind: string): PluginKind {
  if ((PLUGIN_KINDS as readonly string[]).includes(kind)) return kind as PluginKind;
  throw new SigilError('invalid_request', `unknown plugin kind "${kind}"`, {
    hint: `Kinds: ${PLUGIN_KINDS.join(', ')}`,
  });
}

function checkName(name: string): string {
  if (/^[a-z0-9][a-z0-9-]{0,62}$/.test(name)) return name;
  throw new SigilError('invalid_request', `"${name}" is not a plugin name`, {
    hint: 'Lowercase letters, digits and dashes, starting with a letter or digit (at most 63)',
  });
}

/** `npm pack` of packages/plugin-api (its prepack builds dist/) into `destination`; the tarball's file name. */
export function packPluginApi(destination: string): string {
  mkdirSync(destination, { recursive: true });
  const output = execFileSync('npm', ['pack', '--silent', '--pack-destination', destination], {
    cwd: join(REPOSITORY_ROOT, 'packages', 'plugin-api'),
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return basename(output.trim().split('\n').at(-1) as string);
}

/** The versions this repository is tested with, so the new package starts from a known-good set. */
function sigilVersions(): Record<string, string> {
  const manifest = JSON.parse(readFileSync(join(REPOSITORY_ROOT, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
  };
  return { ...manifest.dependencies, ...manifest.devDependencies };
}

function packageJson(name: string, kind: PluginKind, tarball: string): string {
  const versions = sigilVersions();
  const pick = (...names: string[]) => Object.fromEntries(names.map((n) => [n, versions[n] as string]));
  const apiVersion = (
    JSON.parse(readFileSync(join(REPOSITORY_ROOT, 'packages', 'plugin-api', 'package.json'), 'utf8')) as {
      version: string;
    }
  ).version;
  return json({
    name,
    version: '0.1.0',
    description: `A Sigil ${kind} plugin`,
    type: 'module',
    exports: { '.': { types: './dist/index.d.ts', default: './dist/index.js' } },
    files: ['dist'],
    keywords: ['sigil-plugin', kind],
    scripts: {
      build: 'tsc -p tsconfig.build.json',
      prepack: 'npm run build',
      typecheck: 'tsc --noEmit',
      test: 'mocha',
    },
    engines: { node: '>=20.19' },
    peerDependencies: { '@sigil/plugin-api': `^${apiVersion}`, zod: '^4.0.0' },
    devDependencies: {
      '@sigil/plugin-api': `file:vendor/${tarball}`,
      ...pick('zod', 'typescript', 'tsx', 'mocha', '@types/node', '@types/mocha'),
    },
  });
}

function tsconfig(extra: Record<string, unknown> & { include: string[] }) {
  const { include, ...options } = extra;
  return {
    compilerOptions: {
      target: 'ES2022',
      lib: ['ES2023'],
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      skipLibCheck: true,
      isolatedModules: true,
      verbatimModuleSyntax: true,
      allowImportingTsExtensions: options.noEmit === true,
      rewriteRelativeImportExtensions: options.noEmit !== true,
      types: ['node', 'mocha'],
      ...options,
    },
    include,
  };
}

/**
 * Behaviour the kit checks only against what the integrator provides (an upstream and keys, served
 * packages, a funded payer); the stub's placeholders make it fail until they are filled in.
 */
const BEHAVIOUR: Partial<Record<PluginKind, { imports: string; body: string }>> = {
  'llm-provider': {
    imports: 'describeLlmProviderBehaviour, pluginLoader',
    body: `// Streaming, tool calls, cancellation and typed errors, against your upstream: give a model it
// serves and a key it accepts (e.g. from the environment), and how to make it answer 429 and 5xx.
// An upstream of the OpenAI or Anthropic wire can be \`startStandIn()\` of '@sigil/plugin-api/llm/stand-in'
// (in a before hook): models sigil-echo, sigil-slow, sigil-rate-limited (429) and sigil-error (500).
describeLlmProviderBehaviour(pluginLoader(plugin.default, OPTIONS), () => ({
  model: 'TODO-a-model-of-listModels',
  apiKey: process.env.TEMPLATE_PLUGIN_NAME_API_KEY ?? 'TODO-a-key-the-upstream-accepts',
}));
`,
  },
  'package-registry': {
    imports: 'describePackageRegistryBehaviourV2, pluginLoader',
    body: `// Resolve, verified install, idempotence, refused tampering, a moved pin, no install scripts: against
// packages your registry serves for the purpose (publish them in a before hook, e.g. to a local one).
// Options given as a function are read for each instance, so after that hook (its address, digests).
const ENTRY_POINT = { bin: 'TODO-an-executable-the-package-declares', args: [] };
describePackageRegistryBehaviourV2(pluginLoader(plugin.default, () => OPTIONS), () => ({
  plain: {
    name: 'TODO-plain-package',
    range: '^1.0.0',
    version: '1.0.0',
    digest: 'TODO-its-digest',
    entryPoint: ENTRY_POINT,
  },
  tampered: { name: 'TODO-package-served-with-wrong-content', range: '^1.0.0', entryPoint: ENTRY_POINT },
  moved: {
    name: 'TODO-package-whose-version-move-republishes',
    range: '^1.0.0',
    entryPoint: ENTRY_POINT,
    move: async () => {
      throw new Error('TODO: give the version other content under the same name');
    },
  },
}));
`,
  },
};

function kitTest(kind: PluginKind): string {
  const behaviour = BEHAVIOUR[kind];
  return `import { describePluginKit${behaviour ? `, ${behaviour.imports}` : ''} } from '@sigil/plugin-api/kit';
import * as plugin from '../src/index.ts';

/** What an operator would give under \`plugins[].options\`. */
const OPTIONS = {};

/**
 * Every check of the ${kind} contract, on instances this plugin's own factory makes;
 * a failing check quotes the sentence of the contract it tests.
 */
describePluginKit(plugin, OPTIONS);
${behaviour ? `\n${behaviour.body}` : ''}`;
}

function readme(name: string, kind: PluginKind): string {
  return `# ${name}

A Sigil \`${kind}\` plugin.

\`\`\`sh
npm install
npm test          # the ${kind} kit: fails, quoting the contract, until src/index.ts is complete
npm run build     # dist/, what \`npm pack\` ships
\`\`\`

Enable it in a Sigil deployment: \`npm pack\` here, install the tarball where \`sigil.config.json\`
is, with the plugin API's tarball (a peer dependency not yet on npm):
\`npm install /path/to/${name}/vendor/sigil-plugin-api-*.tgz /path/to/${name}/${name}-0.1.0.tgz\`.
Then list it under \`plugins\` beside the defaults it keeps (a \`plugins\` list replaces them), with
the options its config schema requires:

\`\`\`json
{
  "plugins": [
    { "resolve": "tee-none" },
    { "resolve": "registry-npm" },
    { "resolve": "sandbox-linux-namespaces" },
    { "resolve": "${name}", "options": {} }
  ]
}
\`\`\`
${kind === 'package-registry' ? `\nCatalog entries it installs name its kind: \`"registry": "${name}"\`.\n` : ''}
The contract and what its kit checks: the \`${kind}\` page of Sigil's docs/plugins/.
`;
}

const json = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`;
