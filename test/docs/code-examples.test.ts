import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import ts from 'typescript';
import { REPO_ROOT, repoPath } from '../support/paths.ts';

/** README.md and the hand-written pages of docs/ (the generated plugin pages quote the templates, which the repository's typecheck compiles). */
const PAGES = [
  'README.md',
  ...readdirSync(repoPath('docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** The ```ts blocks of a page (a block fenced ```ts fragment is a piece of a larger program, and left out). */
const tsBlocks = (page: string): string[] =>
  [...readFileSync(repoPath(page), 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)].map(
    (match) => match[1] as string,
  );

/**
 * A reader copies the docs' TypeScript into a package of their own: every block must compile as it is,
 * against the plugin API as the repository's tsconfig resolves it (a README example once did not: its
 * `specVersion` widened to string). Each block is a module of its own, written where the tsconfig applies.
 */
describe('docs: TypeScript examples compile', function () {
  this.timeout(120_000);
  const dir = repoPath('test', '.tmp-code-examples');
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('every ```ts block of README.md and docs/*.md type-checks with the repository tsconfig', () => {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const files = PAGES.flatMap((page) =>
      tsBlocks(page).map((code, index) => {
        const file = join(dir, `${page.replace(/[/.]/g, '-')}-${index + 1}.ts`);
        writeFileSync(file, code);
        return file;
      }),
    );
    expect(files, 'the plugin example of docs/plugins.md at least').to.not.have.length(0);
    const config = ts.getParsedCommandLineOfConfigFile(
      repoPath('tsconfig.json'),
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
          throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
        },
      },
    );
    const program = ts.createProgram(files, config!.options);
    const problems = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
      const where = diagnostic.file ? `${diagnostic.file.fileName.slice(REPO_ROOT.length)}: ` : '';
      return where + ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
    });
    expect(problems).to.deep.equal([]);
  });
});
