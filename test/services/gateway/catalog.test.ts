import { expect } from 'chai';
import { catalogEntrySchema } from '../../../services/gateway/catalog.ts';

const entryWith = (registry: string) => ({
  id: 'weather',
  title: 'Weather',
  registry,
  package: '@acme/weather-mcp',
  version: '^1.0.0',
  entry: { bin: 'weather-mcp' },
});

describe('catalog entries name a registry kind', () => {
  it('accepts the built-in kind and one a plugin brings', () => {
    for (const registry of ['npm', 'acme-dir', 'oci2'])
      expect(catalogEntrySchema.parse(entryWith(registry)).registry).to.equal(registry);
  });

  it('refuses what no registryKind could be: case, separators, paths, empty', () => {
    for (const registry of ['Acme', 'acme_dir', 'acme/dir', '../npm', '', '-npm', 'x'.repeat(64)]) {
      const parsed = catalogEntrySchema.safeParse(entryWith(registry));
      expect(parsed.success, registry).to.equal(false);
      expect(parsed.error?.issues[0]?.path, registry).to.deep.equal(['registry']);
    }
  });
});
