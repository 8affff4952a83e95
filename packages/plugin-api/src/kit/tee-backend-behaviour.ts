import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { TeeBackendV1, TeeBackendV2, TeeStatus } from '../index.ts';
import { ensure, expectShape, notApplicableBecause, pass } from './check.ts';
import type { InstanceCheck, KitContext } from './kit.ts';

/**
 * What every `tee-backend` does, v1 and v2: the sentences of packages/plugin-api/src/contracts/tee-backend-v1.ts,
 * checked. The one that matters most is honesty: a backend without a TEE (`none`) says so, seals
 * nothing, attests nothing.
 */

export const TEE_CONTRACT_V1 = 'packages/plugin-api/src/contracts/tee-backend-v1.ts';
const KNOWN_PLATFORMS = ['none', 'sev-snp', 'tdx', 'vtpm'];
/** `attest` binds exactly this many bytes of caller data into the report. */
const REPORT_DATA_BYTES = 64;

const statusSchema = z.object({
  teeEnabled: z.boolean(),
  platform: z.string().min(1),
  keySource: z.enum(['sealed', 'config', 'ephemeral']),
});

const evidenceSchema = z.object({
  platform: z.string().min(1),
  report: z
    .string()
    .min(1)
    .regex(/^[A-Za-z0-9+/]+={0,2}$/, 'must be base64'),
  certificates: z.array(z.string()),
});

export type TeeCheck = InstanceCheck<TeeBackendV1 | TeeBackendV2>;
export type TeeContext = KitContext & { instance: TeeBackendV1 | TeeBackendV2 };

export async function statusOf({ instance, evidence }: TeeContext): Promise<TeeStatus> {
  const status = expectShape(statusSchema, await instance.status(), 'status()');
  evidence.note('status()', status);
  return status;
}

/** Ends the check as not applicable unless the backend is the `none` platform. */
function onlyForNone(instance: TeeBackendV1 | TeeBackendV2): void {
  if (instance.platform !== 'none') notApplicableBecause(`platform is "${instance.platform}", not "none"`);
}

/** Ends the check as not applicable unless the backend reports a TEE. */
export async function onlyWithTee(context: TeeContext): Promise<void> {
  if (!(await statusOf(context)).teeEnabled)
    notApplicableBecause('status() reports no TEE (teeEnabled: false)');
}

export async function attestFresh(
  { instance, evidence }: TeeContext,
  reportData = new Uint8Array(randomBytes(REPORT_DATA_BYTES)),
) {
  const result = await instance.attest(reportData);
  evidence.note(
    'attest(64 random bytes)',
    result === undefined ? 'undefined' : { ...result, report: `${result.report.slice(0, 80)}…` },
  );
  return result;
}

export const teeBackendBehaviour: readonly TeeCheck[] = [
  {
    id: 'tee-backend.platform-name',
    level: 'MUST',
    title: 'platform is a lowercase, dash-separated name',
    spec: `${TEE_CONTRACT_V1}: platform, the name shown in /api/attestation`,
    check: async ({ instance }) => {
      ensure(
        /^[a-z0-9][a-z0-9-]*$/.test(instance.platform),
        `platform "${instance.platform}" is not a lowercase name`,
      );
      return pass();
    },
  },
  {
    id: 'tee-backend.platform-known',
    level: 'SHOULD',
    title: `platform is one of ${KNOWN_PLATFORMS.join(', ')}`,
    spec: `${TEE_CONTRACT_V1}: platform: \`none\`, \`sev-snp\`, \`tdx\`, \`vtpm\``,
    check: async ({ instance }) => {
      ensure(
        KNOWN_PLATFORMS.includes(instance.platform),
        `platform "${instance.platform}" is not a known one`,
      );
      return pass();
    },
  },
  {
    id: 'tee-backend.status-shape',
    level: 'MUST',
    title: 'status() resolves to { teeEnabled, platform, keySource }',
    spec: `${TEE_CONTRACT_V1}: TeeStatus`,
    check: async (context) => {
      await statusOf(context);
      return pass();
    },
  },
  {
    id: 'tee-backend.status-platform',
    level: 'MUST',
    title: 'status().platform is the backend’s platform',
    spec: `${TEE_CONTRACT_V1}: platform, and TeeStatus.platform`,
    check: async (context) => {
      const status = await statusOf(context);
      ensure(
        status.platform === context.instance.platform,
        `status() says platform "${status.platform}", the backend "${context.instance.platform}"`,
      );
      return pass();
    },
  },
  {
    id: 'tee-backend.none-reports-no-tee',
    level: 'MUST',
    title: 'The none platform reports teeEnabled: false',
    spec: `${TEE_CONTRACT_V1}: "A backend must report honestly: none says there is no TEE rather than pretending"`,
    check: async (context) => {
      onlyForNone(context.instance);
      ensure(!(await statusOf(context)).teeEnabled, 'platform none reports teeEnabled: true');
      return pass();
    },
  },
  {
    id: 'tee-backend.none-keys-not-sealed',
    level: 'MUST',
    title: 'The none platform does not claim hardware-sealed keys',
    spec: `${TEE_CONTRACT_V1}: TeeStatus.keySource, "sealed to hardware or come from config"`,
    check: async (context) => {
      onlyForNone(context.instance);
      ensure((await statusOf(context)).keySource !== 'sealed', 'platform none reports keySource: sealed');
      return pass();
    },
  },
  {
    id: 'tee-backend.none-attest-undefined',
    level: 'MUST',
    title: 'The none platform attests nothing: attest() resolves to undefined',
    spec: `${TEE_CONTRACT_V1}: attest, "or undefined where the platform cannot attest"`,
    check: async (context) => {
      onlyForNone(context.instance);
      ensure((await attestFresh(context)) === undefined, 'platform none returned attestation evidence');
      return pass();
    },
  },
  {
    id: 'tee-backend.attest-evidence',
    level: 'MUST',
    title: 'With a TEE, attest() returns evidence of the same platform: base64 report and certificates',
    spec: `${TEE_CONTRACT_V1}: attest, "A fresh report binding reportData (64 bytes)"; AttestationEvidence`,
    check: async (context) => {
      await onlyWithTee(context);
      const evidence = expectShape(evidenceSchema, await attestFresh(context), 'attest()');
      ensure(
        evidence.platform === context.instance.platform,
        `the evidence says platform "${evidence.platform}", the backend "${context.instance.platform}"`,
      );
      return pass();
    },
  },
  {
    id: 'tee-backend.attest-fresh',
    level: 'MUST',
    title: 'With a TEE, two attest() calls with different report data give different reports',
    spec: `${TEE_CONTRACT_V1}: attest, "A fresh report binding reportData"`,
    check: async (context) => {
      await onlyWithTee(context);
      const [first, second] = [await attestFresh(context), await attestFresh(context)];
      ensure(
        first !== undefined && second !== undefined,
        'attest() returned undefined although a TEE is enabled',
      );
      ensure(first.report !== second.report, 'two different reportData values gave the same report');
      return pass();
    },
  },
  {
    id: 'tee-backend.signing-key',
    level: 'MUST',
    title:
      'signingKey(purpose) gives 32 stable bytes per purpose, distinct across purposes, from the source status() reports',
    spec: `${TEE_CONTRACT_V1}: signingKey, "the same key for the same purpose on every call, distinct keys for distinct purposes"`,
    check: async ({ instance, evidence }) => {
      const [first, again, other] = [
        await instance.signingKey('conformance-a'),
        await instance.signingKey('conformance-a'),
        await instance.signingKey('conformance-b'),
      ];
      const hex = (key: Uint8Array) => Buffer.from(key).toString('hex');
      evidence.note('signingKey()', { length: first.key.length, source: first.source });
      ensure(first.key.length === 32, `the key is ${first.key.length} bytes, not 32`);
      ensure(hex(first.key) === hex(again.key), 'two calls for one purpose gave different keys');
      ensure(hex(first.key) !== hex(other.key), 'two purposes gave the same key');
      const status = await instance.status();
      ensure(
        first.source === status.keySource,
        `signingKey says source "${first.source}", status() "${status.keySource}"`,
      );
      return pass();
    },
  },
  // v1 cannot check that reportData is bound into the report: only a platform's parser can. v2's
  // verify() is that parser, so the v2 kit checks the binding (tee-backend-v2-checks.ts).
];
