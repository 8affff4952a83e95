import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { systemClock, type Clock } from '../../../core/clock.ts';
import type { Logger } from '../../../core/log.ts';
import manifest, { type NpmRegistry } from '../../../registries/npm/index.ts';
import { quietLogger } from '../../support/kernel.ts';

/** Real MCP servers from npm, pinned so that a run is reproducible. */
export const MEMORY = { name: '@modelcontextprotocol/server-memory', version: '2026.8.31' };
export const EVERYTHING = { name: '@modelcontextprotocol/server-everything', version: '2026.8.31' };
export const specOf = (pkg: { name: string; version: string }) => ({ spec: `${pkg.name}@${pkg.version}` });

/** A temp directory removed by `cleanup`. */
export function tempDir(prefix: string): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), `sigil-${prefix}-`));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/** Writes a package directory: package.json from `manifest`, plus `files` by relative path. */
export function writePackage(
  dir: string,
  manifest: Record<string, unknown>,
  files: Record<string, string> = { 'index.js': 'module.exports = 1;\n' },
): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  return dir;
}

/** The plugin made by its own manifest, as the plugin host makes it, and started. */
export async function openRegistry(options: {
  registry: string;
  cacheDir: string;
  clock?: Clock;
  logger?: Logger;
}): Promise<NpmRegistry> {
  const { clock = systemClock, logger = quietLogger(), ...config } = options;
  const instance = (await manifest.create({
    config: manifest.config.parse(config),
    deps: { clock },
    logger,
  })) as NpmRegistry;
  await instance.start();
  return instance;
}

/**
 * Starts an installed MCP server with `node <bin>` and talks to it over stdio with the official SDK
 * client: lists its tools, then calls `tool` with `args`. Its environment is minimal (no registry
 * settings, nothing of the host's npm config).
 */
export async function listAndCall(
  bin: string,
  tool: string,
  args: Record<string, unknown>,
  env: Record<string, string> = {},
): Promise<{ tools: string[]; text: string }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'sigil-registry-test', version: '0.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const result = await client.callTool({ name: tool, arguments: args });
    const content = result.content as { type: string; text?: string }[];
    return {
      tools: tools.map((t) => t.name),
      text: content.map((part) => part.text ?? '').join('\n'),
    };
  } finally {
    await client.close();
  }
}
