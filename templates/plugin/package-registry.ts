import { z } from 'zod';
import {
  type CacheContents,
  definePlugin,
  type EntryPoint,
  extensionPoints,
  type InstalledServer,
  type PackageRegistryV2,
  type PackageSpec,
  provide,
  type ResolvedPackage,
  SigilError,
} from '@sigil/plugin-api';

/** Options an operator gives under `plugins[].options`, checked at start-up. */
const config = z
  .object({
    url: z.url().default('https://registry.example.com/').describe('Where the registry answers'),
    cacheDir: z.string().default('data/packages').describe('Where installed packages are kept'),
  })
  .strict();

const notImplemented = (member: string): SigilError =>
  new SigilError('internal', `template-plugin-name: ${member} is not implemented yet`);

/**
 * A `package-registry` (the contract: PackageRegistryV2 in @sigil/plugin-api). Fill in each member; the
 * kit in test/kit.test.ts checks every sentence of the contract and fails until you do.
 */
class Registry implements PackageRegistryV2 {
  readonly specVersion = 'v2';
  /** What catalog entries name in `registry` to be installed by this plugin. */
  readonly registryKind = 'template-plugin-name';

  constructor(private readonly options: z.infer<typeof config>) {}

  async resolve(_spec: PackageSpec): Promise<ResolvedPackage> {
    throw notImplemented('resolve');
  }

  async install(_resolved: ResolvedPackage, _entryPoint: EntryPoint): Promise<InstalledServer> {
    throw notImplemented('install');
  }

  async cacheStatus(): Promise<CacheContents> {
    throw notImplemented('cacheStatus');
  }
}

export default definePlugin({
  kind: 'package-registry',
  name: 'template-plugin-name',
  specVersion: 'v2',
  description: 'template-plugin-name: a package registry',
  config,
  // The catalog entries the gateway installs with this plugin: those whose `registry` is this kind.
  provides: [provide(extensionPoints.registryKinds, 'template-plugin-name')],
  create: ({ config: options }) => new Registry(options),
});
