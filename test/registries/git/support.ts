import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { deflateSync } from 'node:zlib';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { HostLaunch, LaunchDescriptor } from '@sigil/plugin-api';
import { systemClock, type Clock } from '../../../core/clock.ts';
import type { Logger } from '../../../core/log.ts';
import manifest, { type GitRegistry, type GitRegistryConfig } from '../../../registries/git/index.ts';
import { git } from '../../support/git.ts';
import { aptInstall } from '../../support/debian.ts';
import { quietLogger } from '../../support/kernel.ts';

/** The plugin made by its own manifest, as the plugin host makes it, and started. */
export async function openGitRegistry(
  options: Partial<GitRegistryConfig> & { cacheDir: string; clock?: Clock; logger?: Logger },
): Promise<GitRegistry> {
  const { clock = systemClock, logger = quietLogger(), ...config } = options;
  const instance = (await manifest.create({
    config: manifest.config.parse(config),
    deps: { clock },
    logger,
  })) as GitRegistry;
  await instance.start?.();
  return instance;
}

// setuptools first: pip imports the standard library's distutils, which Debian's setuptools then refuses.
const canBuildWheels = (python: string) =>
  spawnSync(python, ['-I', '-c', 'import setuptools, wheel, pip'], { stdio: 'ignore' }).status === 0;

let wheelPython: string | undefined;

/**
 * A Python that builds wheels offline with setuptools: the first of `python3` and Debian's
 * `/usr/bin/python3` that has pip, setuptools and wheel. On a machine with neither (CI runs as
 * root), Debian's packages are installed first.
 */
export function pythonThatBuilds(): string {
  if (wheelPython) return wheelPython;
  let found = ['python3', '/usr/bin/python3'].find(canBuildWheels);
  if (!found) {
    aptInstall('the Git registry Python tests', ['python3-pip', 'python3-setuptools', 'python3-wheel']);
    found = '/usr/bin/python3';
  }
  wheelPython = found;
  return found;
}

/** The interpreter a host sandbox would supply for a runtime: here the gateway's node and the building Python. */
function interpreter(launch: HostLaunch): string {
  if (launch.runtime === 'node') return process.execPath;
  if (launch.runtime === 'python') return pythonThatBuilds();
  return launch.command ?? '';
}

/**
 * Starts what a launch descriptor describes with a plain child process (no sandbox) and talks to it
 * with the official SDK client over stdio: lists its tools, then calls `echo`.
 */
export async function callEcho(
  launch: LaunchDescriptor,
  message: string,
): Promise<{ tools: string[]; text: string }> {
  if (launch.kind !== 'host') throw new Error(`not a host launch: ${launch.kind}`);
  const transport = new StdioClientTransport({
    command: interpreter(launch),
    args: [...launch.args],
    cwd: launch.cwd ?? launch.root,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...launch.env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'sigil-registry-git-test', version: '0.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const result = await client.callTool({ name: 'echo', arguments: { message } });
    const content = result.content as { type: string; text?: string }[];
    return { tools: tools.map((tool) => tool.name), text: content.map((part) => part.text ?? '').join('\n') };
  } finally {
    await client.close();
  }
}

/**
 * Alters a blob in a registry's object store, as a corrupted disk or someone with write access to the
 * cache would: its packs are unpacked into loose objects (git reads a pack before a loose object),
 * then the blob's file is replaced with other content under the same id. git does not re-hash an
 * object it reads, so only a registry that hashes its checkout notices.
 */
export function tamperStoredBlob(store: string, blob: string, content: string): void {
  const packs = join(store, 'objects', 'pack');
  const aside = join(store, 'packs-aside');
  mkdirSync(aside, { recursive: true });
  for (const name of readdirSync(packs)) renameSync(join(packs, name), join(aside, name));
  for (const name of readdirSync(aside).filter((n) => n.endsWith('.pack'))) {
    execFileSync('git', ['--git-dir', store, 'unpack-objects', '-q'], {
      input: readFileSync(join(aside, name)),
    });
  }
  const file = join(store, 'objects', blob.slice(0, 2), blob.slice(2));
  writeFileSync(file, deflateSync(Buffer.from(`blob ${Buffer.byteLength(content)}\0${content}`)));
  if (git(store, 'cat-file', '-p', blob) !== content.trim()) throw new Error('the blob was not replaced');
}
