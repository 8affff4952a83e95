import { z } from 'zod';
import {
  definePlugin,
  type SandboxProcess,
  type SandboxRuntimeV2,
  type SandboxSpecV2,
  type SandboxStatus,
  SigilError,
} from '@sigil/plugin-api';

/** Options an operator gives under `plugins[].options`, checked at start-up. */
const config = z
  .object({
    stateDir: z.string().default('data/sandboxes').describe('Where the runtime keeps its state'),
  })
  .strict();

const notImplemented = (member: string): SigilError =>
  new SigilError('internal', `template-plugin-name: ${member} is not implemented yet`);

/**
 * A `sandbox-runtime` (the contract: SandboxRuntimeV2 in @sigil/plugin-api). Fill in each member; the
 * kit in test/kit.test.ts checks every sentence of the contract and fails until you do.
 */
class Runtime implements SandboxRuntimeV2 {
  readonly specVersion = 'v2';

  constructor(private readonly options: z.infer<typeof config>) {}

  async spawn(_spec: SandboxSpecV2): Promise<SandboxProcess> {
    throw notImplemented('spawn');
  }

  async status(): Promise<SandboxStatus> {
    throw notImplemented('status');
  }
}

export default definePlugin({
  kind: 'sandbox-runtime',
  name: 'template-plugin-name',
  specVersion: 'v2',
  description: 'template-plugin-name: a sandbox runtime',
  config,
  create: ({ config: options }) => new Runtime(options),
});
