import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import semver from 'semver';

/**
 * Every package Sigil runs with (package-lock's non-dev packages, optional ones included) must
 * support the Node releases Sigil says it supports: the oldest that package.json's `engines` admits,
 * and the one running this test (CI runs the suite on Node 20 and on Node 22). A dependency update
 * that raises its floor above them fails here, not on a user's machine.
 */

const repoRoot = join(import.meta.dirname, '..', '..');
const readJson = <T>(file: string) => JSON.parse(readFileSync(join(repoRoot, file), 'utf8')) as T;

interface LockedPackage {
  version?: string;
  dev?: boolean;
  devOptional?: boolean;
  engines?: { node?: string } | string[];
}

describe('Node versions: every runtime dependency supports the Node that Sigil names', () => {
  const ours = readJson<{ engines: { node: string } }>('package.json').engines.node;
  const oldest = semver.minVersion(ours)?.version;
  const lock = readJson<{ packages: Record<string, LockedPackage> }>('package-lock.json');
  const runtimePackages = Object.entries(lock.packages).filter(
    ([path, entry]) => path !== '' && !entry.dev && !entry.devOptional,
  );

  it(`package.json names a minimum (${ours}) and the lock holds runtime packages`, () => {
    expect(oldest, ours).to.be.a('string');
    expect(runtimePackages.length).to.be.greaterThan(100);
  });

  for (const node of [...new Set([oldest ?? '0.0.0', process.versions.node])]) {
    it(`each runtime package's engines.node admits Node ${node}`, () => {
      const refusing = runtimePackages.flatMap(([path, entry]) => {
        // An array of engines is the old npm form, which npm itself ignores.
        const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
        return range === undefined || semver.satisfies(node, range)
          ? []
          : [`${path.replace(/^.*node_modules\//, '')}@${entry.version ?? '?'} (node ${range})`];
      });
      expect(refusing).to.deep.equal([]);
    });
  }
});
