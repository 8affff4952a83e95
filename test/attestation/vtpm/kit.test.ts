import { describeTeeBackendKitV2 } from '@sigil/plugin-api/kit';
import { sealedOnSwtpm, type SealedVtpm } from './on-swtpm.ts';

describe('tee-vtpm on swtpm: the tee-backend v2 kit', function () {
  this.timeout(180_000);
  let vtpm: SealedVtpm;

  before(async () => {
    vtpm = await sealedOnSwtpm();
  });
  after(() => vtpm?.remove());

  // Every check of a TEE applies; only those of the `none` platform do not.
  describeTeeBackendKitV2(() => vtpm.create(), {
    expectNotApplicable: [
      'tee-backend.none-reports-no-tee',
      'tee-backend.none-keys-not-sealed',
      'tee-backend.none-attest-undefined',
    ],
  });
});
