import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { expect } from 'chai';
import { isSigilError, type SigilError } from '@sigil/plugin-api';
import { ProcessStdioTransport } from '../../../core/mcp/process-transport.ts';
import type { LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import { planRoot } from '../../../plugins/sandboxes/linux-namespaces/root.ts';
import { hostSpec, ProbeRuntimes } from './support.ts';

/**
 * Python launches: the host's python3 (the real interpreter behind whatever `python3` names), its
 * standard library and the libraries its extension modules load, and nothing of the host's installed
 * packages; under the syscall filter, threads included.
 */

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'sandbox');
const server = join(fixtures, 'python-mcp');

/** Runs `code` with the sandbox's python; its stdout parsed. */
async function runPython<T>(runtime: LinuxNamespacesRuntime, root: string, code: string): Promise<T> {
  const sandbox = await runtime.spawn(hostSpec({ runtime: 'python', root, args: ['-c', code] }));
  let out = '';
  let err = '';
  sandbox.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  sandbox.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const exit = await sandbox.exited;
  expect(exit.code, err).to.equal(0);
  return JSON.parse(out) as T;
}

describe('sandbox-linux-namespaces: python launches', function () {
  this.timeout(60_000);
  let probes: ProbeRuntimes;
  let work: string;

  before(() => {
    probes = new ProbeRuntimes('python');
    work = mkdtempSync(join(tmpdir(), 'sigil-sandbox-python-'));
    chmodSync(work, 0o755);
  });
  afterEach(() => probes.stop());
  after(() => {
    probes.remove();
    rmSync(work, { recursive: true, force: true });
  });

  it('runs a plain-Python MCP server on the host python3: the SDK client lists its tools and calls echo (answered from a thread)', async () => {
    const runtime = await probes.runtime();
    expect((await runtime.status()).runs.host).to.include('python');
    const sandbox = await runtime.spawn(
      hostSpec({ runtime: 'python', root: server, args: ['-u', join(server, 'server.py')] }),
    );
    const client = new Client({ name: 'sandbox-test', version: '1.0.0' });
    await client.connect(new ProcessStdioTransport(sandbox));
    try {
      const { tools } = await client.listTools();
      expect(tools.map((tool) => tool.name)).to.deep.equal(['echo']);
      const result = await client.callTool({ name: 'echo', arguments: { message: 'from python' } });
      expect(JSON.stringify(result.content)).to.match(/from python \(python 3\.\d+\.\d+\)/);
    } finally {
      await client.close();
    }
  });

  it("follows a launcher to the real interpreter, and shows its standard library but none of the host's installed packages", async () => {
    // A launcher as a pyenv shim is one: a script that execs the interpreter, which a sandbox cannot
    // run (it holds no bash, no shim directory).
    const launcher = join(work, 'python3');
    writeFileSync(launcher, '#!/bin/sh\nexec /usr/bin/python3 "$@"\n', { mode: 0o755 });
    const runtime = await probes.runtime({ python: launcher });
    const { details } = await runtime.status();
    const real = realpathSync('/usr/bin/python3');
    expect(details.python).to.include({ executable: real });
    const inside = await runPython<{
      executable: string;
      path: string[];
      packages: Record<string, string[]>;
    }>(
      runtime,
      work,
      [
        'import json, os, sys, ssl, sqlite3, ctypes, hashlib',
        'paths = [p for p in sys.path if os.path.isdir(p)]',
        "dirs = [os.path.join(p, n) for p in paths for n in ('site-packages', 'dist-packages')]",
        "print(json.dumps({'executable': sys.executable, 'path': paths,",
        "  'packages': {d: os.listdir(d) for d in dirs + sys.path if 'packages' in d and os.path.isdir(d)}}))",
      ].join('\n'),
    );
    expect(inside.executable).to.equal(real);
    // Of its path, only what the interpreter has without any site: no host site or dist-packages.
    const standard = JSON.parse(
      execFileSync(
        real,
        [
          '-I',
          '-S',
          '-c',
          'import json, os, sys; print(json.dumps([p for p in sys.path if os.path.isdir(p)]))',
        ],
        {
          encoding: 'utf8',
        },
      ),
    ) as string[];
    expect(inside.path).to.deep.equal(standard);
    for (const [dir, entries] of Object.entries(inside.packages)) expect(entries, dir).to.deep.equal([]);
  });

  it('runs the python3 on PATH by default, behind whatever launcher PATH holds', async () => {
    const runtime = await probes.runtime();
    const { details } = await runtime.status();
    const asked = execFileSync(
      'python3',
      ['-I', '-S', '-c', 'import os, sys; print(os.path.realpath(sys.executable))'],
      {
        encoding: 'utf8',
      },
    ).trim();
    expect(details.python).to.include({ executable: asked });
    const inside = await runPython<{ executable: string; packages: Record<string, string[]> }>(
      runtime,
      work,
      [
        'import json, os, sys',
        'found = {p: os.listdir(p) for p in sys.path if p.endswith("-packages") and os.path.isdir(p)}',
        'print(json.dumps({"executable": sys.executable, "packages": found}))',
      ].join('\n'),
    );
    expect(inside.executable).to.equal(asked);
    // A pyenv python keeps its site-packages inside its standard library: seen, but empty.
    for (const [dir, entries] of Object.entries(inside.packages)) expect(entries, dir).to.deep.equal([]);
  });

  it('without a python3, says so in status() and refuses a python launch as unavailable', async () => {
    const path = process.env.PATH;
    process.env.PATH = join(work, 'empty');
    let runtime: LinuxNamespacesRuntime;
    try {
      runtime = await probes.runtime();
      // Asked once, now (status() is the first to need it): the PATH without python3 is what it sees.
      const status = await runtime.status();
      expect(status.runs.host).to.deep.equal(['node', 'binary']);
      expect(status.details.python)
        .to.have.property('unavailable')
        .that.match(/python3/);
    } finally {
      process.env.PATH = path;
    }
    const error = await runtime.spawn(hostSpec({ runtime: 'python', root: work, args: ['-c', 'pass'] })).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(isSigilError(error), String(error)).to.equal(true);
    expect({ code: (error as SigilError).code, details: (error as SigilError).details }).to.deep.equal({
      code: 'unavailable',
      details: { reason: 'python_unavailable' },
    });
  });

  it('refuses to start when the configured python does not work', async () => {
    const error = await probes.runtime({ python: join(work, 'no-such-python') }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(isSigilError(error), String(error)).to.equal(true);
    expect((error as SigilError).code).to.equal('unavailable');
    expect((error as SigilError).message).to.include('no-such-python');
  });

  it('covers a hidden directory inside a mounted one with an empty directory, after the one it covers', () => {
    const library = join(work, 'lib', 'python3.99');
    mkdirSync(join(library, 'site-packages'), { recursive: true });
    const plan = planRoot({
      systemPaths: [],
      requiredPaths: [library],
      hidden: { paths: [join(library, 'site-packages'), join(work, 'elsewhere')], emptyDir: '/empty' },
    });
    const binds = plan.binds.filter((bind) => bind.target.startsWith(work));
    expect(binds.map(({ source, target }) => ({ source, target }))).to.deep.equal([
      { source: library, target: library },
      { source: '/empty', target: join(library, 'site-packages') },
    ]);
  });
});
