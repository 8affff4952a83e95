import { expect } from 'chai';
import { bestWheel, parseFilename } from '../../../registries/pypi/distributions.ts';
import { probePython } from '../../../registries/pypi/python.ts';

const file = (filename: string, extra: { requiresPython?: string } = {}) => ({
  filename,
  url: `http://127.0.0.1/files/${filename}`,
  sha256: '0'.repeat(64),
  yanked: false,
  ...extra,
});

describe('registry-pypi picks the wheel the host python3 runs', () => {
  it('parses wheel and sdist names, and ignores files of another project or format', () => {
    expect(parseFilename(file('Sigil_Echo-1.0-2-py2.py3-none-any.whl'), 'sigil-echo')).to.deep.include({
      kind: 'wheel',
      version: '1.0',
      tags: ['py2-none-any', 'py3-none-any'],
    });
    expect(parseFilename(file('sigil_echo-1.0.post1.tar.gz'), 'sigil-echo')).to.deep.include({
      kind: 'sdist',
      version: '1.0.post1',
    });
    expect(parseFilename(file('other-1.0-py3-none-any.whl'), 'sigil-echo')).to.equal(undefined);
    expect(parseFilename(file('sigil_echo-1.0.win32.exe'), 'sigil-echo')).to.equal(undefined);
  });

  it("prefers a pure wheel, takes one built for the host's interpreter and platform, and never another's", async () => {
    const host = await probePython('python3');
    const [major, minor] = host.markers.python_version?.split('.') ?? [];
    const cp = `cp${major}${minor}`;
    const platform = host.tags.find((tag) => tag.startsWith(`${cp}-${cp}-`))?.split('-')[2];
    if (!platform)
      throw new Error(`python3 reports no platform tag of its own: ${host.tags.slice(0, 5).join(', ')}`);
    const parse = (name: string) => parseFilename(file(name), 'pkg');
    const pure = parse('pkg-1.0-py3-none-any.whl');
    const native = parse(`pkg-1.0-${cp}-${cp}-${platform}.whl`);
    const foreign = [
      parse('pkg-1.0-cp27-cp27mu-manylinux1_x86_64.whl'),
      parse('pkg-1.0-cp311-cp311-win_amd64.whl'),
    ];
    const candidates = [...foreign, native, pure].filter((d) => d !== undefined);
    expect(bestWheel(candidates, host)?.filename).to.equal('pkg-1.0-py3-none-any.whl');
    expect(
      bestWheel(
        candidates.filter((d) => d !== pure),
        host,
      )?.filename,
    ).to.equal(native?.filename);
    expect(
      bestWheel(
        foreign.filter((d) => d !== undefined),
        host,
      ),
    ).to.equal(undefined);
    // Requires-Python from the index rules a file out.
    const future = parseFilename(file('pkg-2.0-py3-none-any.whl', { requiresPython: '>=4' }), 'pkg');
    expect(bestWheel(future ? [future] : [], host)).to.equal(undefined);
  });
});
