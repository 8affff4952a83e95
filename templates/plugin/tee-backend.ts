import { z } from 'zod';
import {
  type AttestationEvidenceV2,
  definePlugin,
  type DerivedKey,
  type EvidenceVerification,
  type ExpectedEvidence,
  SigilError,
  type TeeBackendV2,
  type TeeStatus,
} from '@sigil/plugin-api';

/** Options an operator gives under `plugins[].options`, checked at start-up. */
const config = z
  .object({
    device: z.string().default('/dev/tee0').describe('The device the backend talks to'),
  })
  .strict();

const notImplemented = (member: string): SigilError =>
  new SigilError('internal', `template-plugin-name: ${member} is not implemented yet`);

/**
 * A `tee-backend` (the contract: TeeBackendV2 in @sigil/plugin-api). Fill in each member; the kit in
 * test/kit.test.ts checks every sentence of the contract and fails until you do.
 */
class Backend implements TeeBackendV2 {
  readonly specVersion = 'v2';
  readonly platform = 'template-plugin-name';

  constructor(private readonly options: z.infer<typeof config>) {}

  async status(): Promise<TeeStatus> {
    throw notImplemented('status');
  }

  async attest(_reportData: Uint8Array): Promise<AttestationEvidenceV2 | undefined> {
    throw notImplemented('attest');
  }

  async signingKey(_purpose: string): Promise<DerivedKey> {
    throw notImplemented('signingKey');
  }

  async verify(
    _evidence: AttestationEvidenceV2,
    _expected?: ExpectedEvidence,
  ): Promise<EvidenceVerification> {
    throw notImplemented('verify');
  }
}

export default definePlugin({
  kind: 'tee-backend',
  name: 'template-plugin-name',
  specVersion: 'v2',
  description: 'template-plugin-name: a TEE backend',
  config,
  create: ({ config: options }) => new Backend(options),
});
