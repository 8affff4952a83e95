import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** README.md, deploy/README.md and every page under docs/ and docs/plugins/. */
const PAGES = [
  join(ROOT, 'README.md'),
  join(ROOT, 'deploy', 'README.md'),
  ...['docs', 'docs/plugins'].flatMap((folder) =>
    readdirSync(join(ROOT, folder))
      .filter((name) => name.endsWith('.md'))
      .map((name) => join(ROOT, folder, name)),
  ),
];

/** The text of a page outside fenced code blocks and inline code, where links are links. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes; repeats get -1, -2… */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading = ''] of markdown
    .replace(/^```[\s\S]*?^```/gm, '')
    .matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const slug = heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** The relative links of a page: `[text](target)`, without external URLs. */
function relativeLinks(markdown: string): string[] {
  return [...prose(markdown).matchAll(/\]\(([^)\s]+)(?: "[^"]*")?\)/g)]
    .map(([, target = '']) => target)
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

/** What is wrong with one link of `page`, or undefined when it leads somewhere. */
function brokenLink(page: string, target: string): string | undefined {
  const [path = '', anchor] = target.split('#');
  const file = path === '' ? page : resolve(dirname(page), decodeURIComponent(path));
  if (!existsSync(file)) return `${target}: no file ${relative(ROOT, file)}`;
  if (anchor === undefined || anchor === '') return undefined;
  if (statSync(file).isDirectory() || !file.endsWith('.md')) return `${target}: an anchor into a non-page`;
  return anchorsOf(readFileSync(file, 'utf8')).has(anchor) ? undefined : `${target}: no heading #${anchor}`;
}

describe('links in README.md and docs/', () => {
  it('finds the headings GitHub makes anchors of', () => {
    const anchors = anchorsOf(
      '# Payments (x402)\n## The dev chain\n```\n# not a heading\n```\n## The dev chain\n',
    );
    expect([...anchors]).to.deep.equal(['payments-x402', 'the-dev-chain', 'the-dev-chain-1']);
  });

  it('sees a link to a missing file or heading as broken', () => {
    const readme = join(ROOT, 'README.md');
    expect(brokenLink(readme, 'docs/no-such-page.md')).to.match(/no file docs\/no-such-page\.md/);
    expect(brokenLink(readme, 'docs/payments.md#no-such-heading')).to.match(/no heading/);
    expect(brokenLink(readme, 'docs/payments.md#the-dev-chain')).to.equal(undefined);
  });

  for (const page of PAGES) {
    it(`every relative link of ${relative(ROOT, page)} leads to a file and heading that exist`, () => {
      const markdown = readFileSync(page, 'utf8');
      const broken = relativeLinks(markdown)
        .map((target) => brokenLink(page, target))
        .filter((problem) => problem !== undefined);
      expect(broken).to.deep.equal([]);
    });
  }
});
