import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { catalogFileSchema } from '../../services/gateway/catalog.ts';

const docs = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs');

/** The ```json blocks of a docs page, parsed. */
const jsonBlocks = (page: string): unknown[] =>
  [...readFileSync(join(docs, page), 'utf8').matchAll(/```json\n([\s\S]*?)```/g)].map(
    (match) => JSON.parse(match[1] as string) as unknown,
  );

/** Examples a reader copies must be accepted as they are (a catalog missing `title` once was not). */
describe('docs: examples', () => {
  for (const page of ['gateway.md', 'plugins.md']) {
    it(`every catalog example in docs/${page} is a catalog file the gateway loads`, () => {
      const catalogs = jsonBlocks(page).filter(
        (block) => typeof block === 'object' && block !== null && 'servers' in block,
      );
      expect(catalogs).to.not.have.length(0);
      for (const catalog of catalogs) {
        const parsed = catalogFileSchema.safeParse(catalog);
        expect(parsed.success, JSON.stringify(parsed.error?.issues)).to.equal(true);
      }
    });
  }
});
