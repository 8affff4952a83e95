import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { builtinPlugins } from '../../services/builtin-plugins.ts';

/** The names in the first column of the "Built-in plugins" table of docs/plugins.md. */
function documentedBuiltins(): string[] {
  const page = readFileSync(new URL('../../docs/plugins.md', import.meta.url), 'utf8');
  const section = page.split('## Built-in plugins')[1]?.split('\n## ')[0] ?? '';
  return [...section.matchAll(/^\| `([a-z0-9-]+)` +\|/gm)].map((row) => row[1]!);
}

/** Issue 22's trial found three built-in plugins missing from the table; the table now follows the code. */
describe('docs/plugins.md built-in plugins', () => {
  it('lists every plugin Sigil ships, and only those', () => {
    expect(documentedBuiltins()).to.have.members(Object.keys(builtinPlugins));
  });
});
