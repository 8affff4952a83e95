import { createHash, createPublicKey, randomBytes, verify } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { expect } from 'chai';
import { jwksSha256 } from '../../../core/auth/delegation/report-data.ts';
import { preAuthEncoding } from '../../../services/shared/dsse.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { errorOf } from '../../core/auth/support.ts';
import { sealedOnSwtpm, type SealedVtpm } from '../../attestation/vtpm/on-swtpm.ts';
import { pluginsWithTee, Stack } from '../runtime/support.ts';
import { BUNDLE_FILE, BundleFolder } from './offline-verification/support.ts';

/**
 * `/api/attestation/provenance` and `/api/attestation/bundle` of both services, and the bundle's
 * script run as a relying party runs it (a fresh folder with nothing but the bundle, plain `node`):
 * on tee-vtpm over swtpm every check passes and each tampering fails the check it should; on tee-none
 * the evidence check fails, saying there is no TEE.
 */

type Service = 'runtime' | 'gateway';
type Json = Record<string, unknown>;
interface Provenance {
  envelope: { payloadType: string; payload: string; signatures: { keyid: string; sig: string }[] };
  publicKey: { algorithm: string; pem: string; hex: string };
  keyid: string;
  keySource: string;
}

const sha256 = (data: Uint8Array) => createHash('sha256').update(data).digest();
const nonce = () => randomBytes(32).toString('hex');
/** The checks of the bundle itself, after the platform's (`evidence.*`). */
const BUNDLE_CHECKS: Record<Service, string[]> = {
  runtime: ['nonce', 'jwks-hash', 'provenance-key', 'provenance-signature', 'code-hash', 'lockfile'],
  gateway: [
    'nonce',
    'proof-key-fingerprint',
    'provenance-key',
    'provenance-signature',
    'code-hash',
    'lockfile',
  ],
};
/** What tee-vtpm's verifier checks of a quote given the REPORT_DATA it must bind. */
const VTPM_CHECKS = ['report', 'ak', 'signature', 'signer', 'ak-trusted', 'pcr-digest', 'report-data'].map(
  (id) => `evidence.${id}`,
);

async function fetched(stack: Stack, service: Service, path: string): Promise<Response> {
  const res = await stack.get(service, path);
  expect(res.status, `${service} ${path}`).to.equal(200);
  return res;
}
const jsonOf = async <T = Json>(stack: Stack, service: Service, path: string) =>
  (await (await fetched(stack, service, path)).json()) as T;

/** The parts of a bundle the tampering tests change. */
type Bundle = Json & { report: Json; expected: Json; provenance: Json; buildInfo: Json };

/** A copy of a bundle changed by `change`. */
function changed(bundleText: string, change: (bundle: Bundle) => void): Json {
  const bundle = JSON.parse(bundleText) as Bundle;
  change(bundle);
  return bundle;
}

describe('attestation provenance and bundle on tee-vtpm (swtpm)', function () {
  this.timeout(180_000);
  let vtpm: SealedVtpm;
  let stack: Stack;
  before(async () => {
    vtpm = await sealedOnSwtpm();
    stack = await Stack.start({
      database: TEST_DATABASES[0]!,
      config: {
        plugins: pluginsWithTee({
          resolve: 'tee-vtpm',
          enabled: true,
          options: { tcti: vtpm.swtpm.tcti, sealedDir: vtpm.sealedDir },
        }),
      },
    });
  });
  after(async () => {
    await stack?.close();
    await vtpm?.remove();
  });

  for (const service of ['runtime', 'gateway'] as const) {
    describe(`on the ${service}`, () => {
      it('signs an in-toto SLSA provenance of its code hash in a DSSE envelope, with a sealed key bound at REPORT_DATA[48:64]', async () => {
        const provenance = await jsonOf<Provenance>(stack, service, '/api/attestation/provenance');
        const { envelope, publicKey } = provenance;
        expect(envelope.payloadType).to.equal('application/vnd.in-toto+json');
        const payload = Buffer.from(envelope.payload, 'base64');
        const key = createPublicKey(publicKey.pem);
        expect(key.asymmetricKeyType).to.equal('ed25519');
        expect(Buffer.from(key.export({ format: 'jwk' }).x as string, 'base64url').toString('hex')).to.equal(
          publicKey.hex,
        );
        const pae = preAuthEncoding(envelope.payloadType, payload);
        const [signature] = envelope.signatures;
        expect(verify(null, pae, key, Buffer.from(signature!.sig, 'base64'))).to.equal(true);
        expect(signature!.keyid).to.equal(provenance.keyid);
        expect(provenance.keyid).to.equal(sha256(Buffer.from(publicKey.hex, 'hex')).toString('hex'));
        expect(provenance.keySource).to.equal('sealed');

        const build = await jsonOf(stack, service, '/api/attestation/build-info');
        const statement = JSON.parse(payload.toString('utf8')) as {
          _type: string;
          subject: { name: string; digest: { sha256: string } }[];
          predicateType: string;
          predicate: {
            buildDefinition: {
              internalParameters: { nodeVersion: string };
              resolvedDependencies: { name: string; digest: { sha256?: string } }[];
            };
          };
        };
        expect(statement._type).to.equal('https://in-toto.io/Statement/v1');
        expect(statement.predicateType).to.equal('https://slsa.dev/provenance/v1');
        expect(statement.subject.map((subject) => subject.digest.sha256)).to.deep.equal([build.codeHash]);
        const { buildDefinition } = statement.predicate;
        expect(buildDefinition.internalParameters.nodeVersion).to.equal(process.version);
        expect(buildDefinition.resolvedDependencies).to.deep.include({
          name: 'package-lock.json',
          digest: { sha256: build.lockfileSha256 },
        });

        const report = await jsonOf(stack, service, `/api/attestation/report?nonce=${nonce()}`);
        const reportData = Buffer.from(String(report.reportData), 'hex');
        expect(reportData.subarray(48).toString('hex')).to.equal(provenance.keyid.slice(0, 32));
      });

      it('serves a bundle whose script, run offline with nothing but the bundle, passes every check', async () => {
        const asked = nonce();
        const res = await fetched(stack, service, `/api/attestation/bundle?nonce=${asked}`);
        expect(res.headers.get('cache-control')).to.equal('no-store');
        const text = await res.text();
        const bundle = JSON.parse(text) as Json & { report: Json; offlineVerification: Json };
        expect(bundle).to.include({ format: 'sigil-attestation-bundle/v1', service });
        expect(bundle.report).to.include({ platform: 'vtpm', nonce: asked });
        expect(bundle.offlineVerification.scriptSha256).to.equal(
          sha256(Buffer.from(String(bundle.offlineVerification.script))).toString('hex'),
        );
        const folder = new BundleFolder(text);
        try {
          expect(readdirSync(folder.dir).sort()).to.deep.equal([BUNDLE_FILE, 'verify-bundle.cjs']);
          const run = folder.run();
          expect(run.failed, run.output).to.deep.equal([]);
          expect(run.passed).to.deep.equal(['bundle', ...VTPM_CHECKS, ...BUNDLE_CHECKS[service]]);
          expect(run.detail('nonce')).to.contain(asked);
          expect(run.status, run.output).to.equal(0);
        } finally {
          folder.remove();
        }
      });
    });
  }

  describe('a tampered bundle fails, naming the check', () => {
    let runtime: string;
    let gateway: string;
    let folder: BundleFolder;
    before(async () => {
      runtime = await (await fetched(stack, 'runtime', `/api/attestation/bundle?nonce=${nonce()}`)).text();
      gateway = await (await fetched(stack, 'gateway', `/api/attestation/bundle?nonce=${nonce()}`)).text();
      folder = new BundleFolder(runtime);
    });
    after(() => folder?.remove());

    const failures = (bundle: Json) => {
      const run = folder.runOn(bundle);
      expect(run.status, run.output).to.equal(1);
      return run.failed;
    };

    it('one bit flipped in the hardware report: the quote signature', () => {
      const bundle = changed(runtime, ({ report }) => {
        const quote = Buffer.from(String((report.evidence as Json).report), 'base64');
        quote[quote.length - 40]! ^= 0x01;
        (report.evidence as Json).report = quote.toString('base64');
      });
      expect(failures(bundle)).to.include('evidence.signature');
    });

    it('another JWKS: its hash is not the one the report binds', () => {
      const bundle = changed(runtime, (document) => {
        const jwks = document.jwks as { keys: Json[] };
        jwks.keys = [...jwks.keys, { ...jwks.keys[0], kid: 'another' }];
      });
      expect(failures(bundle)).to.deep.equal(['jwks-hash']);
    });

    it('another JWKS with REPORT_DATA expected to match it: the hardware report does not bind that', () => {
      const bundle = changed(runtime, (document) => {
        const jwks = document.jwks as { keys: Json[] };
        jwks.keys = [...jwks.keys, { ...jwks.keys[0], kid: 'another' }];
        const hash = jwksSha256(jwks).subarray(0, 16).toString('hex');
        const expected = String(document.expected.reportData);
        document.expected.reportData = `${expected.slice(0, 64)}${hash}${expected.slice(96)}`;
      });
      expect(failures(bundle)).to.deep.equal(['evidence.report-data']);
    });

    it('a changed provenance payload: its signature', () => {
      const bundle = changed(runtime, ({ provenance }) => {
        const envelope = provenance.envelope as Json;
        const statement = JSON.parse(
          Buffer.from(String(envelope.payload), 'base64').toString('utf8'),
        ) as Json;
        (statement.predicate as { runDetails: Json }).runDetails = { builder: { id: 'https://elsewhere' } };
        envelope.payload = Buffer.from(JSON.stringify(statement)).toString('base64');
      });
      expect(failures(bundle)).to.deep.equal(['provenance-signature']);
    });

    it('another provenance key: REPORT_DATA[48:64] does not bind it, and the signature is not its', () => {
      const bundle = changed(runtime, ({ provenance }) => {
        (provenance.publicKey as Json).hex = randomBytes(32).toString('hex');
      });
      expect(failures(bundle)).to.deep.equal(['provenance-key', 'provenance-signature']);
    });

    it('a changed code hash: the provenance names another', () => {
      const bundle = changed(runtime, ({ buildInfo }) => {
        buildInfo.codeHash = randomBytes(32).toString('hex');
      });
      expect(failures(bundle)).to.deep.equal(['code-hash']);
    });

    it('another lockfile: the provenance names another', () => {
      const bundle = changed(runtime, ({ buildInfo }) => {
        buildInfo.lockfileSha256 = randomBytes(32).toString('hex');
      });
      expect(failures(bundle)).to.deep.equal(['lockfile']);
    });

    it("another nonce than the report's: REPORT_DATA[0:32]", () => {
      const bundle = changed(runtime, ({ report }) => {
        report.nonce = nonce();
      });
      expect(failures(bundle)).to.deep.equal(['nonce']);
    });

    it("the gateway's: another proof key fingerprint", () => {
      const bundle = changed(gateway, (document) => {
        document.proofKeyFingerprint = randomBytes(32).toString('hex');
      });
      expect(failures(bundle)).to.deep.equal(['proof-key-fingerprint']);
    });

    it('not a bundle at all: one failed check saying what is missing', () => {
      const run = folder.runOn({ format: 'something else' });
      expect(run.status).to.equal(1);
      expect(run.failed).to.deep.equal(['bundle']);
      expect(run.detail('bundle')).to.match(/^not a sigil-attestation-bundle\/v1: format/);
    });
  });
});

describe('attestation bundle on tee-none', function () {
  this.timeout(120_000);
  let stack: Stack;
  before(async () => {
    stack = await Stack.start({ database: TEST_DATABASES[0]! });
  });
  after(() => stack?.close());

  for (const service of ['runtime', 'gateway'] as const) {
    it(`the ${service}'s script fails the evidence check, saying the service runs without a TEE`, async () => {
      const text = await (await fetched(stack, service, `/api/attestation/bundle?nonce=${nonce()}`)).text();
      const folder = new BundleFolder(text);
      try {
        const run = folder.run();
        expect(run.status, run.output).to.equal(1);
        expect(run.failed).to.deep.equal(['evidence']);
        expect(run.detail('evidence')).to.contain(`the ${service} runs without a TEE (platform none)`);
        expect(run.detail('evidence')).to.contain('the bundle carries no evidence');
        expect(run.passed).to.deep.equal(['bundle', ...BUNDLE_CHECKS[service]]);
        expect(run.output).to.contain('NOT verified: 1 of');
      } finally {
        folder.remove();
      }
    });
  }

  it('refuses a bundle without a nonce of the caller: 400 invalid_request', async () => {
    const error = await errorOf(await stack.get('gateway', '/api/attestation/bundle'));
    expect(error).to.include({ status: 400, code: 'invalid_request' });
  });
});
