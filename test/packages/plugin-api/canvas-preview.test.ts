import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { previewFile } from '@sigil/plugin-api/canvas';

/** previewFile: what the runtime's preview route and the kit's preview serve, on a real directory. */
describe('@sigil/plugin-api/canvas previewFile', () => {
  let base: string;
  let dir: string;

  before(async () => {
    base = await realpath(await mkdtemp(join(tmpdir(), 'sigil-preview-')));
    dir = join(base, 'workspace');
    await mkdir(join(dir, '.git'), { recursive: true });
    await mkdir(join(dir, 'docs'));
    await writeFile(join(dir, 'index.html'), '<h1>Home</h1>');
    await writeFile(join(dir, 'docs', 'index.html'), '<h1>Docs</h1>');
    await writeFile(join(dir, '.git', 'config'), '[core]');
    await writeFile(join(base, 'outside.html'), 'not the workspace');
    await symlink(join(base, 'outside.html'), join(dir, 'link-out.html'));
    await symlink(join(dir, 'docs', 'index.html'), join(dir, 'link-in.html'));
  });

  after(() => rm(base, { recursive: true, force: true }));

  it('serves a file by its segments, and index.html for a folder', async () => {
    expect(await previewFile(dir, ['docs', 'index.html'])).to.equal(join(dir, 'docs', 'index.html'));
    expect(await previewFile(dir, [])).to.equal(join(dir, 'index.html'));
    expect(await previewFile(dir, [''])).to.equal(join(dir, 'index.html'));
    expect(await previewFile(dir, ['docs', ''])).to.equal(join(dir, 'docs', 'index.html'));
    expect(await previewFile(dir, ['link-in.html'])).to.equal(join(dir, 'docs', 'index.html'));
  });

  it('serves nothing of .git, above the workspace, through a symlink out of it, nor a folder or a missing file', async () => {
    for (const path of [
      ['.git', 'config'],
      ['..', 'outside.html'],
      ['docs', '..', '..', 'outside.html'],
      ['docs', '', 'index.html'],
      ['link-out.html'],
      ['docs'],
      ['missing.html'],
    ])
      expect(await previewFile(dir, path), path.join('/')).to.equal(undefined);
    expect(await previewFile(join(base, 'no-workspace'), ['index.html'])).to.equal(undefined);
  });
});
