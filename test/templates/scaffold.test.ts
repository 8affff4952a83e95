import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { isSigilError, PLUGIN_KINDS } from '@sigil/plugin-api';
import { importPluginModule, runPluginKit } from '../../conformance/plugin.ts';
import { packPluginApi, scaffoldPlugin } from '../../templates/scaffold.ts';

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, '../..');

/** Output without its colours (mocha colours it where CI is set). */
// eslint-disable-next-line no-control-regex -- ANSI escape sequences start with ESC
const plain = (text: string): string => text.replace(/\x1b\[[0-9;]*m/g, '');

/** The command's exit code and output, without throwing on a failure. */
async function outcome(
  cwd: string,
  command: string,
  args: string[],
): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run(command, args, { cwd, maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, output: plain(`${stdout}${stderr}`) };
  } catch (err) {
    const failed = err as { code: number; stdout: string; stderr: string };
    return { code: failed.code, output: plain(`${failed.stdout}${failed.stderr}`) };
  }
}

/** Issue 23: `sigil plugin new <kind> <name>` gives a package that compiles and fails its kit until filled in. */
describe('sigil plugin new', function () {
  this.timeout(300_000);
  let parent: string;
  before(() => {
    parent = mkdtempSync(join(tmpdir(), 'sigil-scaffold-'));
  });
  after(() => rmSync(parent, { recursive: true, force: true }));

  it('makes a package for every kind, named throughout', () => {
    const packed = join(parent, 'packed');
    const pluginApiTarball = join(packed, packPluginApi(packed));
    for (const kind of PLUGIN_KINDS) {
      const name = `acme-${kind}`;
      const made = scaffoldPlugin({ kind, name, parentDir: parent, pluginApiTarball });
      expect(made.files).to.include.members([
        'package.json',
        'src/index.ts',
        'test/kit.test.ts',
        'README.md',
      ]);
      const source = readFileSync(join(made.dir, 'src', 'index.ts'), 'utf8');
      expect(source).to.include(`kind: '${kind}'`).and.include(`name: '${name}'`);
      expect(source).to.not.include('template-plugin-name');
      const manifest = JSON.parse(readFileSync(join(made.dir, 'package.json'), 'utf8'));
      expect(manifest.name).to.equal(name);
      expect(manifest.devDependencies['@sigil/plugin-api']).to.match(
        /^file:vendor\/sigil-plugin-api-.*\.tgz$/,
      );
      expect(existsSync(join(made.dir, manifest.devDependencies['@sigil/plugin-api'].slice(5)))).to.equal(
        true,
      );
    }
  });

  it('compiles, and its own npm test runs the kit, which fails on the stub quoting the contract', async () => {
    const made = scaffoldPlugin({ kind: 'llm-provider', name: 'acme-chat', parentDir: parent });
    const installed = await outcome(made.dir, 'npm', [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
    ]);
    expect(installed.code, installed.output).to.equal(0);
    const typecheck = await outcome(made.dir, 'npx', ['tsc', '--noEmit']);
    expect(typecheck.code, typecheck.output).to.equal(0);
    const build = await outcome(made.dir, 'npm', ['run', 'build']);
    expect(build.code, build.output).to.equal(0);
    const tested = await outcome(made.dir, 'npm', ['test']);
    expect(tested.code).to.not.equal(0);
    expect(tested.output).to.match(/✔ manifest\.exported/);
    expect(tested.output).to.match(
      /\d+\) llm-provider\.models-priced \(MUST\): listModels\(\) lists at least one model/,
    );
    expect(tested.output).to.match(/\d+\) llm-provider\.stream-text/);
    expect(tested.output).to.include('acme-chat: listModels is not implemented yet');
  });

  it('the canvas-node stub fails the v2 kit on the checks that run its example, until run is written', async () => {
    const report = await runPluginKit(await importPluginModule('./templates/plugin/canvas-node.ts', ROOT));
    const failed = report.results.filter((result) => result.status === 'fail');
    expect(failed.map((result) => result.id)).to.deep.equal([
      'canvas-node.run-outputs',
      'canvas-node.log',
      'canvas-node.abort',
    ]);
    for (const { reason } of failed)
      expect(reason).to.include('template-plugin-name: run is not implemented yet');
  });

  it('refuses an unknown kind, a name that is not one, and a folder that exists, making nothing', () => {
    const refusal = (options: { kind: string; name: string }) => {
      try {
        scaffoldPlugin({ ...options, parentDir: parent });
      } catch (err) {
        expect(isSigilError(err)).to.equal(true);
        return err as { code: string; message: string; hint?: string };
      }
      throw new Error('expected a refusal');
    };
    const kind = refusal({ kind: 'quantum-oracle', name: 'acme-q' });
    expect(kind).to.include({ code: 'invalid_request', message: 'unknown plugin kind "quantum-oracle"' });
    expect(kind.hint).to.include('llm-provider');
    expect(existsSync(join(parent, 'acme-q'))).to.equal(false);
    expect(refusal({ kind: 'tee-backend', name: '../escape' })).to.include({ code: 'invalid_request' });
    expect(refusal({ kind: 'tee-backend', name: 'Acme' })).to.include({ code: 'invalid_request' });
    expect(existsSync(join(parent, '..', 'escape'))).to.equal(false);
    scaffoldPlugin({ kind: 'tee-backend', name: 'acme-twice', parentDir: parent });
    expect(refusal({ kind: 'tee-backend', name: 'acme-twice' })).to.include({ code: 'conflict' });
  });
});
