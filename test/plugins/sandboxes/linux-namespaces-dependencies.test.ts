import { chmodSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { configSchema } from '../../../plugins/sandboxes/linux-namespaces/config.ts';
import { Dependencies } from '../../../plugins/sandboxes/linux-namespaces/dependencies.ts';
import { detectHost } from '../../../plugins/sandboxes/linux-namespaces/detect-host.ts';
import { findTools } from '../../../plugins/sandboxes/linux-namespaces/host.ts';

/**
 * The libraries a sandboxed program needs (ldd): node's are looked up while the runtime starts
 * (issue 30, start-up), so a node server's first spawn, on the first tools/call's path, finds them.
 */
describe('sandbox-linux-namespaces: library lookups', function () {
  this.timeout(60_000);
  const node = realpathSync(process.execPath);
  let dir: string;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-ldd-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('looks up node’s libraries when it detects the host, before any spawn asks', async () => {
    const facts = await detectHost({ config: configSchema.parse({}), filterInterpreter: undefined });
    expect(facts.dependencies.known(node)).to.equal(true);
    const needs = await facts.dependencies.of([node]);
    expect(needs[0]).to.equal(node);
    expect(needs.some((file) => /\/libc\.so|ld-musl/.test(file))).to.equal(true);
  });

  it('runs ldd once for a prefetched file: the spawn that asks next takes the answer', async () => {
    const ldd = findTools().ldd as string;
    const log = join(dir, 'runs');
    const counting = join(dir, 'ldd');
    writeFileSync(counting, `#!/bin/sh\necho run >> ${log}\nexec ${ldd} "$@"\n`);
    chmodSync(counting, 0o755);
    const dependencies = new Dependencies(counting);
    expect(dependencies.known(node)).to.equal(false);
    dependencies.prefetch([node]);
    expect(dependencies.known(node)).to.equal(true);
    const [first, second] = await Promise.all([dependencies.of([node]), dependencies.of([node])]);
    expect(second).to.deep.equal(first);
    expect(first.length).to.be.greaterThan(1);
    expect(readFileSync(log, 'utf8')).to.equal('run\n');
  });
});
