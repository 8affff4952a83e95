/**
 * `npm run build [-- --out <dir>]`: compiles the runtime's TypeScript once, into dist/ by default, for
 * `NODE_ENV=production sigil …` (bin/sigil.js), which then runs it with plain Node.js and no tsx.
 *
 * - tsc emits what tsconfig.build.json includes, mirroring the repository (core/x.ts → dist/core/x.js),
 *   so a path a module derives from its own location (import.meta.url) keeps its meaning; relative
 *   `.ts` imports become `.js` (rewriteRelativeImportExtensions).
 * - `@sigil/plugin-api[/…]` is rewritten to the relative path of its compiled sources in the same
 *   output, where tsconfig's `paths` (and tsx) resolve it from source: core and the in-tree plugins share
 *   one instance of the API as they do from source, and the output does not depend on
 *   node_modules/@sigil/plugin-api (the package's own dist/, built separately, is for plugins from outside).
 * - No type check (noCheck): that is `npm run typecheck`, and with isolatedModules and
 *   verbatimModuleSyntax no file's output depends on types. Syntax errors still fail the build.
 * - Files the code reads or runs beside itself (CommonJS helpers, JSON artifacts, the Python helper)
 *   are copied; last, build.json (core/layout.ts) records when and from what the output was made, and
 *   the hash of each code file of the output, which the code hash in proofs covers (build-info.ts), so a
 *   start does not read and hash them again.
 * - The output's own modules are also bundled from bin/cli.js into a few files (BUNDLE_DIR, below),
 *   which is what bin/sigil.js runs: the mirrored files stay, for what reads or runs them by path.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, extname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build as esbuild, type Plugin } from 'esbuild';
import ts from 'typescript';
import { BUILD_MANIFEST, type BuildManifest } from '../core/layout.ts';
import { codeFileHashes } from '../services/shared/build-info.ts';

const REPOSITORY = join(fileURLToPath(import.meta.url), '..', '..');
const CONFIG = 'tsconfig.build.json';
/** What a module may read or run beside itself that tsc does not emit. */
const ASSET_EXTENSIONS = new Set(['.cjs', '.json', '.py']);
/** Folders of such files outside what tsc compiles. */
const EXTRA_ASSET_DIRS = ['packages/plugin-api/probes'];
/** Written first into the output: a build that failed halfway still says whose folder it is. */
const OUTPUT_MARKER = '.sigil-build-output';
/** Where the bundle goes in the output (bin/sigil.js names it too). */
const BUNDLE_DIR = join('bin', 'bundle');

async function build(out: string): Promise<BuildManifest> {
  const builtAt = new Date().toISOString();
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(REPOSITORY, CONFIG),
    { outDir: out },
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: fail },
  ) as ts.ParsedCommandLine;
  if (parsed.errors.length > 0) fail(...parsed.errors);
  clearOutput(out, parsed.fileNames);

  const program = ts.createProgram(parsed.fileNames, parsed.options);
  const emitted = program.emit(undefined, undefined, undefined, false, {
    after: [rewritePathMappedImports(parsed.options)],
  });
  const diagnostics = [
    ...program.getOptionsDiagnostics(),
    ...program.getSyntacticDiagnostics(),
    ...emitted.diagnostics,
  ];
  if (diagnostics.length > 0 || emitted.emitSkipped) fail(...diagnostics);

  const sources = program
    .getSourceFiles()
    .filter((file) => !file.isDeclarationFile && !program.isSourceFileFromExternalLibrary(file))
    .map((file) => relative(REPOSITORY, file.fileName));
  const assets = assetDirs(parsed).flatMap((dir) => listAssets(dir));
  for (const asset of assets) {
    const target = join(out, asset);
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(join(REPOSITORY, asset), target);
  }
  await bundle(out);
  const manifest: BuildManifest = {
    builtAt,
    sourceRoot: relative(out, REPOSITORY),
    inputs: [...new Set(['tsconfig.json', CONFIG, ...sources, ...assets])].sort(),
    // Last, over the finished output (build.json itself is outside what the code hash covers).
    codeFiles: codeFileHashes(out),
  };
  writeFileSync(join(out, BUILD_MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

/**
 * Empties `out` for a build: it must lie inside the repository (the compiled code finds node_modules
 * by walking up), hold none of the sources, and be absent, empty or a former build's output (marked),
 * so a mistyped --out never deletes anything else.
 */
function clearOutput(out: string, sources: readonly string[]): void {
  const inside = relative(REPOSITORY, out);
  if (inside === '' || inside.startsWith('..') || isAbsolute(inside))
    refuse(`--out ${out}: the output must be a folder inside ${REPOSITORY}`);
  if (sources.some((file) => file.startsWith(`${out}${sep}`)))
    refuse(`--out ${out}: the folder holds sources of the build`);
  if (existsSync(out) && readdirSync(out).length > 0 && !existsSync(join(out, OUTPUT_MARKER)))
    refuse(`--out ${out}: the folder holds files and is not a build's output (no ${OUTPUT_MARKER})`);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, OUTPUT_MARKER), '');
}

/**
 * Rewrites imports that tsconfig's `paths` maps (the plugin API's entry points) to the relative path of
 * the module they resolve to, with .js: the output mirrors the sources, so the relative path between
 * two sources is the one between their outputs.
 */
function rewritePathMappedImports(options: ts.CompilerOptions): ts.TransformerFactory<ts.SourceFile> {
  const patterns = Object.keys(options.paths ?? {});
  const mapped = (specifier: string) =>
    patterns.some((pattern) =>
      pattern.endsWith('*') ? specifier.startsWith(pattern.slice(0, -1)) : specifier === pattern,
    );
  const cache = ts.createModuleResolutionCache(REPOSITORY, (name) => name, options);
  const target = (specifier: string, from: string): string => {
    const resolved = ts.resolveModuleName(
      specifier,
      from,
      options,
      ts.sys,
      cache,
      undefined,
      ts.ModuleKind.ESNext,
    ).resolvedModule?.resolvedFileName;
    if (resolved === undefined || !resolved.endsWith('.ts') || resolved.endsWith('.d.ts'))
      throw new Error(`${relative(REPOSITORY, from)}: "${specifier}" maps to no TypeScript source`);
    const path = relative(dirname(from), resolved).split(sep).join('/').replace(/\.ts$/, '.js');
    return path.startsWith('.') ? path : `./${path}`;
  };
  return (context) => (file) => {
    const { factory } = context;
    const rewritten = (literal: ts.Expression): ts.StringLiteral | undefined =>
      ts.isStringLiteral(literal) && mapped(literal.text)
        ? factory.createStringLiteral(target(literal.text, file.fileName))
        : undefined;
    const specifierOf = (node: ts.Node): ts.Expression | undefined => {
      if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) return node.moduleSpecifier;
      if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword)
        return node.arguments[0];
      return undefined;
    };
    const visit = (node: ts.Node): ts.Node => {
      const specifier = specifierOf(node);
      const to = specifier && rewritten(specifier);
      if (!to) return ts.visitEachChild(node, visit, context);
      if (ts.isImportDeclaration(node))
        return factory.updateImportDeclaration(node, node.modifiers, node.importClause, to, node.attributes);
      if (ts.isExportDeclaration(node)) {
        const { modifiers, isTypeOnly, exportClause, attributes } = node;
        return factory.updateExportDeclaration(node, modifiers, isTypeOnly, exportClause, to, attributes);
      }
      const call = node as ts.CallExpression;
      return factory.updateCallExpression(call, call.expression, call.typeArguments, [
        to,
        ...call.arguments.slice(1),
      ]);
    };
    return ts.visitNode(file, visit) as ts.SourceFile;
  };
}

/**
 * Bundles the output's own modules, from bin/cli.js, into BUNDLE_DIR with esbuild (the packages of
 * node_modules stay imports): Node's ESM loader resolves, reads, compiles and links every module on its
 * own, and `sigil up` loads some 400 of ours, ~200 ms of its start (issue 30, start-up). What is
 * imported lazily stays lazy: a chunk of its own, loaded at the same first use. Each module's
 * `import.meta.url` is rewritten to its mirrored file, so a path it derives from its own location (a
 * helper beside it, the code root) means what it means unbundled.
 */
async function bundle(out: string): Promise<void> {
  const bundleDir = join(out, BUNDLE_DIR);
  const ownLocation: Plugin = {
    name: 'own-location',
    setup(build) {
      build.onLoad({ filter: /\.js$/ }, async ({ path }) => {
        const source = await readFile(path, 'utf8');
        if (!source.includes('import.meta.url')) return undefined;
        const fromBundle = relative(bundleDir, path).split(sep).join('/');
        return {
          contents: `const moduleUrl = new URL(${JSON.stringify(fromBundle)}, import.meta.url).href;\n${source.replaceAll('import.meta.url', 'moduleUrl')}`,
          loader: 'js',
        };
      });
    },
  };
  await esbuild({
    entryPoints: [join(out, 'bin', 'cli.js')],
    outdir: bundleDir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    plugins: [ownLocation],
    logLevel: 'warning',
  });
}

/** The folders tsc compiles (its `include`) and the extra ones, as absolute paths. */
function assetDirs(parsed: ts.ParsedCommandLine): string[] {
  const include = (parsed.raw as { include: string[] }).include;
  return [...include, ...EXTRA_ASSET_DIRS]
    .map((entry) => join(REPOSITORY, entry))
    .filter((path) => existsSync(path) && statSync(path).isDirectory());
}

/** Asset files under `dir`, relative to the repository. */
function listAssets(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : listAssets(path);
    return ASSET_EXTENSIONS.has(extname(entry.name)) ? [relative(REPOSITORY, path)] : [];
  });
}

function refuse(reason: string): never {
  process.stderr.write(`npm run build: ${reason}\n`);
  process.exit(1);
}

function fail(...diagnostics: ts.Diagnostic[]): never {
  const host: ts.FormatDiagnosticsHost = {
    getCanonicalFileName: (name) => name,
    getCurrentDirectory: () => REPOSITORY,
    getNewLine: () => '\n',
  };
  process.stderr.write(ts.formatDiagnosticsWithColorAndContext(diagnostics, host));
  process.exit(1);
}

const { values } = parseArgs({ options: { out: { type: 'string', default: 'dist' } } });
const out = resolve(values.out);
const started = performance.now();
const manifest = await build(out);
process.stdout.write(
  `built ${manifest.inputs.length} files into ${relative(process.cwd(), out) || '.'} in ${((performance.now() - started) / 1000).toFixed(1)} s\n`,
);
