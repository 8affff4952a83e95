import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { fixturePath } from './paths.ts';

/**
 * Packages built the way a third party builds them, outside Sigil's tree: their own folder, their own
 * npm install and npm test, packed to tarballs and installed by path into a deployment's folder.
 */

const run = promisify(execFile);
/** Plugins written as separate packages (test/fixtures/out-of-tree/<name>). */
const outOfTree = fixturePath('out-of-tree');

/** `npm <args>` in `cwd`, offline where the cache has what it needs; its output. */
export async function npm(cwd: string, ...args: string[]): Promise<string> {
  const { stdout, stderr } = await run('npm', [...args, '--prefer-offline', '--no-audit', '--no-fund'], {
    cwd,
    maxBuffer: 16 * 1024 * 1024,
  });
  return `${stdout}${stderr}`;
}

export interface Packed {
  tarball: string;
  /** `sha512-…` of the tarball: what npm records as its integrity. */
  integrity: string;
}

/** `npm pack` of the package in `dir` into `destination`. */
export async function pack(dir: string, destination: string): Promise<Packed> {
  const output = await npm(dir, 'pack', '--silent', '--pack-destination', destination);
  const tarball = join(destination, basename(output.trim().split('\n').at(-1) as string));
  return {
    tarball,
    integrity: `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`,
  };
}

/**
 * The out-of-tree plugin `name` built as its own package in `work` against the plugin API's tarball
 * (as a published version would come, the peer dependency too): its own `npm test` (which runs its
 * kit) must pass; its output and its packed tarball.
 */
export async function buildPlugin(name: string, pluginApi: string, work: string) {
  const dir = join(work, name);
  cpSync(join(outOfTree, name), dir, { recursive: true });
  await npm(dir, 'install', '--save-dev', pluginApi);
  const testOutput = await npm(dir, 'test');
  return { testOutput, ...(await pack(dir, work)) };
}

/** A deployment's folder in `dir` (a package.json and nothing else), with `tarballs` installed into it. */
export async function deploymentWith(dir: string, tarballs: string[]): Promise<string> {
  cpSync(join(outOfTree, 'deployment.json'), join(dir, 'package.json'));
  await npm(dir, 'install', ...tarballs);
  return dir;
}

/**
 * The package in `dir` packed with its dependencies inside (`bundleDependencies`), as a registry that
 * fetches nothing needs it: a copy in `work` gets them with npm install, then is packed.
 */
export async function packBundled(dir: string, work: string): Promise<Packed> {
  const copy = join(work, `${basename(dir)}-bundled`);
  cpSync(dir, copy, { recursive: true });
  const manifest = JSON.parse(readFileSync(join(copy, 'package.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(copy, 'package.json'), JSON.stringify({ ...manifest, bundleDependencies: true }));
  await npm(copy, 'install', '--omit=dev', '--ignore-scripts', '--no-package-lock');
  return pack(copy, work);
}
