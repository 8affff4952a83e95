import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect } from 'chai';

const here = dirname(fileURLToPath(import.meta.url));

/**
 * Issue 30 (start-up): the MCP SDK client's wire schemas are built once per process, so whether a
 * gateway builds them after listening rather than on its first tools/call shows only in a process
 * where no gateway ran before: mcp-client-schemas.fresh.ts runs in a mocha process of its own.
 */
describe('gateway: the MCP client schemas built after listening (in a fresh process)', function () {
  this.timeout(240_000);

  it('are asked for after the listening line, and the first tools/call builds none', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        join(here, '../../../node_modules/mocha/bin/mocha.js'),
        '--no-config',
        '--import=tsx',
        '--timeout',
        '180000',
        '--exit',
        join(here, 'mcp-client-schemas.fresh.ts'),
      ],
      { env: process.env, maxBuffer: 16 * 1024 * 1024 },
    ).catch((err: { stdout?: string; stderr?: string }) => {
      throw new Error(`the fresh process failed:\n${err.stdout ?? ''}\n${err.stderr ?? ''}`);
    });
    expect(stdout).to.match(/1 passing/);
    expect(stdout).to.not.match(/failing/);
  });
});
