import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { ensure, pass } from '@sigil/plugin-api/kit';
import type { ServiceName } from '../../http.ts';
import type { DeploymentContext } from '../context.ts';
import { expectJson } from '../expect.ts';
import { verifyBundle } from '../../../services/shared/offline-verification/verify-bundle.ts';
import { freshNonce, noTee } from './report.ts';
import { RUNNER_VERIFIERS } from './verifiers.ts';

/**
 * `GET /api/attestation/bundle` as a relying party uses it: the runner verifies the bundle for its own
 * fresh nonce with its own verifiers (so a script that prints PASS whatever it reads cannot pass),
 * then runs the bundle's own script with plain `node` in an empty folder holding only the bundle.
 */

export const BUNDLE_PATH = '/api/attestation/bundle';
const SCRIPT_TIMEOUT_MS = 60_000;

const bundleSchema = z.looseObject({
  report: z.looseObject({ nonce: z.string(), evidence: z.unknown() }),
  offlineVerification: z.looseObject({ script: z.string().min(1), scriptSha256: z.string() }),
});

const run = promisify(execFile);

export async function checkBundle(context: DeploymentContext, service: ServiceName) {
  const nonce = freshNonce();
  const what = `GET ${BUNDLE_PATH}?nonce=<fresh> on the ${service}`;
  const response = await context.http.request({
    service,
    path: `${BUNDLE_PATH}?nonce=${nonce.toString('hex')}`,
  });
  const bundle = expectJson(response, 200, bundleSchema, what);
  ensure(
    bundle.report.nonce.toLowerCase() === nonce.toString('hex'),
    `${what}: the bundle's report is for nonce ${bundle.report.nonce}, not the runner's`,
  );
  ensure(bundle.report.evidence !== null, noTee(service));
  const own = await verifyBundle(bundle, { verifiers: RUNNER_VERIFIERS });
  context.evidence.note("the runner's verification of the bundle", own);
  const failed = own.checks.filter((check) => !check.ok);
  ensure(
    own.verified,
    `${what}: the runner's own verification fails: ${failed.map((check) => `${check.id}: ${check.detail}`).join('; ')}`,
  );
  const { script, scriptSha256 } = bundle.offlineVerification;
  ensure(
    createHash('sha256').update(script).digest('hex') === scriptSha256.toLowerCase(),
    `${what}: offlineVerification.scriptSha256 is not the SHA-256 of its script`,
  );
  const folder = mkdtempSync(join(tmpdir(), 'sigil-conformance-bundle-'));
  try {
    writeFileSync(join(folder, 'bundle.json'), JSON.stringify(bundle));
    writeFileSync(join(folder, 'verify-bundle.cjs'), script);
    const outcome = await run(process.execPath, ['verify-bundle.cjs', 'bundle.json'], {
      cwd: folder,
      env: { PATH: process.env.PATH ?? '' },
      timeout: SCRIPT_TIMEOUT_MS,
    }).then(
      ({ stdout }) => ({ code: 0, stdout }),
      (err: { code?: number; stdout?: string }) => ({ code: err.code ?? -1, stdout: err.stdout ?? '' }),
    );
    context.evidence.note("the bundle's script, run offline", outcome);
    ensure(
      outcome.code === 0,
      `${what}: its script, run with node in an empty folder holding only the bundle, exits ${outcome.code}: ${outcome.stdout
        .split('\n')
        .filter((line) => line.startsWith('FAIL'))
        .join('; ')}`,
    );
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
  return pass();
}
