import { expect } from 'chai';
import { join } from 'node:path';
import teeNone, * as teeNoneModule from '../../attestation/none/index.ts';
import { describePluginKit, describeTeeBackendKitV2, type CheckResult } from '@sigil/plugin-api/kit';
import knex from 'knex';
import * as teeKeepsStateModule from '../fixtures/plugins/tee-keeps-state.ts';
import { importPluginModule, runPluginKit } from '../../conformance/plugin.ts';
import { REPORT_FILES } from '../../conformance/report.ts';
import { quietLogger } from '../support/kernel.ts';
import { SecretRegistry } from '../../core/log.ts';
import { reportDir, runSigil } from './support.ts';

const ROOT = join(import.meta.dirname, '../..');
const FIXTURES = './test/fixtures/plugins';
/** Checks that need real TEE hardware: on `none` they must report not-applicable. */
const TEE_ONLY_CHECKS = [
  'tee-backend.attest-evidence',
  'tee-backend.attest-fresh',
  'tee-backend.verify-own-evidence',
  'tee-backend.verify-report-data',
  'tee-backend.verify-flipped-bit',
];
/** What does not apply to `none`: the checks above, and those of an offline verifier, which it has none of. */
const NOT_APPLICABLE_TO_NONE = [...TEE_ONLY_CHECKS, 'tee-backend.offline-verifier'];
/** The key material tee-keeps-state is given, and puts in its status: no evidence may show it. */
const KEY_MATERIAL = 'tee-keeps-state-key-material-0123456789';

/** Runs the kit on a module and returns its results by id. */
async function kitResults(
  specifier: string,
  options: Record<string, unknown> = {},
): Promise<Record<string, CheckResult>> {
  const report = await runPluginKit(await importPluginModule(specifier, ROOT), { options });
  return Object.fromEntries(report.results.map((result) => [result.id, result]));
}

const failedIds = (results: Record<string, CheckResult>) =>
  Object.values(results)
    .filter((result) => result.status === 'fail')
    .map((result) => result.id);

describe('conformance plugin kits', () => {
  describe('the tee-backend kit from mocha, on attestation/none instances', () => {
    describeTeeBackendKitV2(
      async () =>
        teeNone.create({ config: {}, deps: { secrets: new SecretRegistry() }, logger: quietLogger() }),
      {
        expectNotApplicable: NOT_APPLICABLE_TO_NONE,
      },
    );
  });

  describe('the whole plugin kit from mocha, on the attestation/none module', () => {
    describePluginKit(teeNoneModule, {}, { expectNotApplicable: NOT_APPLICABLE_TO_NONE });
  });

  describe('the whole plugin kit from mocha, with a database of the caller', () => {
    // The kit takes the database when the suite is declared, before any hook: knex connects on first use.
    const db = knex({
      client: 'sqlite3',
      connection: { filename: ':memory:' },
      useNullAsDefault: true,
      pool: { min: 1, max: 1 },
    });
    after(async () => {
      const rows = await db('tee_keeps_state_instances').count({ count: '*' });
      await db.destroy();
      expect(Number(rows[0]?.count), 'instances the kit made on the given database').to.be.greaterThan(1);
    });
    describePluginKit(
      teeKeepsStateModule,
      { keyMaterial: KEY_MATERIAL },
      { expectNotApplicable: NOT_APPLICABLE_TO_NONE, services: { db } },
    );
  });

  describe('runPluginKit', () => {
    it('passes attestation/none: every MUST passes, attestation checks do not apply', async () => {
      const results = await kitResults('./attestation/none/index.ts');
      expect(failedIds(results)).to.deep.equal([]);
      expect(results['tee-backend.none-attest-undefined']?.status).to.equal('pass');
      expect(results['tee-backend.attest-evidence']).to.include({
        status: 'not-applicable',
        reason: 'status() reports no TEE (teeEnabled: false)',
      });
    });

    it('gives a plugin that depends on db a database, when the caller gives none', async () => {
      const results = await kitResults(`${FIXTURES}/tee-keeps-state.ts`, { keyMaterial: KEY_MATERIAL });
      expect(failedIds(results)).to.deep.equal([]);
      expect(results['tee-backend.signing-key']?.status).to.equal('pass');
    });

    it('redacts from its results every secret the plugin adds to the secrets service', async () => {
      const results = await kitResults(`${FIXTURES}/tee-keeps-state.ts`, {
        keyMaterial: KEY_MATERIAL,
        refuse: true,
      });
      expect(results['tee-backend.members']?.reason).to.equal(
        'cannot create an instance: tee-keeps-state refuses the key [REDACTED]',
      );
      expect(JSON.stringify(results)).to.not.include(KEY_MATERIAL);
    });

    it('fails a plugin whose instance carries another specVersion than its manifest', async () => {
      const results = await kitResults(`${FIXTURES}/tee-wrong-spec-version.ts`);
      expect(failedIds(results)).to.deep.equal(['tee-backend.spec-version']);
      expect(results['tee-backend.spec-version']?.reason).to.equal(
        // The manifest's version picks the contract the kit checks.
        'the instance says specVersion "v2", the contract is v1',
      );
    });

    it('fails a plugin missing a method of its contract, read from a `manifest` export', async () => {
      const results = await kitResults(`${FIXTURES}/tee-missing-method.ts`);
      expect(results['manifest.exported']?.status).to.equal('pass');
      expect(results['tee-backend.members']?.reason).to.equal('attest is undefined, expected function');
      expect(failedIds(results)).to.include('tee-backend.none-attest-undefined');
    });

    it('fails a backend whose offlineVerifier judges otherwise than its verify(), or does not load', async () => {
      const lenient = await kitResults(`${FIXTURES}/tee-offline-disagrees.ts`, { verifier: 'lenient' });
      expect(failedIds(lenient)).to.deep.equal(['tee-backend.offline-verifier']);
      expect(lenient['tee-backend.offline-verifier']?.reason).to.equal(
        'for random bytes, verify() says verified false [evidence:failed], the offline verifier verified true [evidence:ok]',
      );
      const missing = await kitResults(`${FIXTURES}/tee-offline-disagrees.ts`, { verifier: 'missing' });
      expect(failedIds(missing)).to.deep.equal(['tee-backend.offline-verifier']);
      expect(missing['tee-backend.offline-verifier']?.reason).to.match(
        /^offlineVerifier \/\S+\/no-such-verifier\.ts does not load: /,
      );
    });

    it('fails a none backend that pretends to have a TEE', async () => {
      const results = await kitResults(`${FIXTURES}/tee-pretends.ts`, { region: 'eu' });
      expect(failedIds(results)).to.deep.equal([
        'tee-backend.none-reports-no-tee',
        'tee-backend.none-keys-not-sealed',
        'tee-backend.none-attest-undefined',
        'tee-backend.attest-fresh',
      ]);
    });

    it('fails a manifest with an unsupported specVersion and a name that is not lowercase', async () => {
      const results = await kitResults(`${FIXTURES}/unsupported-spec-version.ts`);
      expect(failedIds(results)).to.include.members([
        'manifest.spec-version-supported',
        'manifest.name-format',
      ]);
    });

    it('fails options the schema rejects, naming the option, and then checks no instance', async () => {
      const results = await kitResults(`${FIXTURES}/tee-pretends.ts`, { region: 3 });
      expect(results['manifest.config-accepts-options']?.reason).to.match(
        /^config rejects the options at options\.region: /,
      );
      expect(results['tee-backend.members']?.status).to.equal('not-applicable');
      expect(failedIds(results)).to.deep.equal(['manifest.config-accepts-options']);
    });
  });

  describe('sigil conformance plugin', () => {
    it('passes attestation/none with exit code 0 and prints one line per check', async () => {
      const run = await runSigil(['conformance', 'plugin', './attestation/none/index.ts'], {}, ROOT);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.stdout).to.match(/PASS +MUST +tee-backend\.none-reports-no-tee/);
      expect(run.stdout).to.match(/N\/A +MUST +tee-backend\.attest-fresh/);
      expect(run.stdout).to.include('plugin conformance: OK');
    });

    it('exits 1 on a broken plugin and writes the reports when asked', async () => {
      const out = reportDir();
      try {
        const run = await runSigil(
          ['conformance', 'plugin', `${FIXTURES}/tee-wrong-spec-version.ts`, '--out', out.dir],
          {},
          ROOT,
        );
        expect(run.code).to.equal(1);
        expect(run.stdout).to.match(/FAIL +MUST +tee-backend\.spec-version/);
        const report = JSON.parse(out.read(REPORT_FILES.json)) as { target: Record<string, string> };
        expect(report.target).to.include({ plugin: 'tee-wrong-spec-version', kind: 'tee-backend' });
      } finally {
        out.cleanup();
      }
    });

    it('explains each failed check of a broken plugin with its reason and the contract text it checks', async () => {
      const specifier = `${FIXTURES}/tee-pretends.ts`;
      const options = { region: 'eu' };
      const failed = Object.values(await kitResults(specifier, options)).filter(
        (result) => result.status === 'fail',
      );
      expect(failed.map((result) => result.spec))
        .to.have.length(4)
        .and.to.satisfy((specs: string[]) =>
          specs.every((spec) =>
            /^packages\/plugin-api\/src\/contracts\/tee-backend-v1\.ts: .*".+"/.test(spec),
          ),
        );
      const run = await runSigil(
        ['conformance', 'plugin', specifier, '--options', JSON.stringify(options)],
        {},
        ROOT,
      );
      expect(run.code).to.equal(1);
      for (const result of failed)
        expect(run.stdout).to.include(
          `${result.id.padEnd(34)} ${result.title}\n      -> ${result.reason}\n      checks: ${result.spec}\n`,
        );
    });

    it('exits 2 for a module that does not exist and for options that are not a JSON object', async () => {
      const missing = await runSigil(['conformance', 'plugin', './no/such/plugin.ts'], {}, ROOT);
      expect(missing.code).to.equal(2);
      expect(missing.stderr).to.include('no such file');
      const unknownPackage = await runSigil(['conformance', 'plugin', 'sigil-no-such-plugin'], {}, ROOT);
      expect(unknownPackage.code).to.equal(2);
      const badOptions = await runSigil(
        ['conformance', 'plugin', './attestation/none/index.ts', '--options', '[1]'],
        {},
        ROOT,
      );
      expect(badOptions.code).to.equal(2);
      expect(badOptions.stderr).to.include('--options must be a JSON object');
    });
  });
});
