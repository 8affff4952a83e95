import { expect } from 'chai';
import {
  evaluateMarker,
  normalizeName,
  parseMarker,
  parseRequirement,
} from '../../../registries/pypi/requirements.ts';

/** What python3.11 on Linux x86_64 reports (registries/pypi/python.ts asks the real one). */
const LINUX_311 = {
  implementation_name: 'cpython',
  implementation_version: '3.11.7',
  os_name: 'posix',
  platform_machine: 'x86_64',
  platform_python_implementation: 'CPython',
  platform_release: '6.1.0',
  platform_system: 'Linux',
  platform_version: '#1 SMP',
  python_full_version: '3.11.7',
  python_version: '3.11',
  sys_platform: 'linux',
};

const holds = (marker: string, extra = '') => evaluateMarker(parseMarker(marker), { ...LINUX_311, extra });

describe('registry-pypi reads PEP 508 requirements and markers', () => {
  it('normalises project names as PEP 503 does', () => {
    expect(
      ['Sigil_Echo.Server', 'sigil--echo__server', 'SIGIL-ECHO-SERVER'].map(normalizeName),
    ).to.deep.equal(Array(3).fill('sigil-echo-server'));
  });

  it('parses the forms of Requires-Dist that wheels write', () => {
    expect(parseRequirement('requests')).to.deep.include({
      name: 'requests',
      extras: [],
      specifier: '',
      marker: undefined,
    });
    expect(parseRequirement('anyio (>=3.5, <5)')).to.deep.include({ name: 'anyio', specifier: '>=3.5,<5' });
    expect(
      parseRequirement('Uvicorn[Standard,http_tools]>=0.23; sys_platform != "emscripten"'),
    ).to.deep.include({
      name: 'Uvicorn',
      extras: ['standard', 'http-tools'],
      specifier: '>=0.23',
    });
    expect(() => parseRequirement('pkg @ https://example.com/pkg.whl')).to.throw(/direct URL/);
    expect(() => parseRequirement('pkg >=> 1')).to.throw(/PEP 440/);
  });

  it('evaluates markers for the host: versions by PEP 440, strings as strings, extras normalised', () => {
    expect(holds('python_version >= "3.8"')).to.equal(true);
    // As strings "3.11" < "3.9"; as versions (which PEP 508 says to use) 3.11 is the newer.
    expect(holds('python_version < "3.9"')).to.equal(false);
    expect(holds('python_version > "3.9"')).to.equal(true);
    expect(holds('python_full_version == "3.11.*"')).to.equal(true);
    expect(holds('"3.8" <= python_version and sys_platform == "linux"')).to.equal(true);
    expect(
      holds('sys_platform == "win32" or (os_name == "posix" and platform_machine in "x86_64 aarch64")'),
    ).to.equal(true);
    expect(holds('platform_system not in "Windows Darwin"')).to.equal(true);
    expect(holds("implementation_name == 'pypy'")).to.equal(false);
    expect(holds('os.name == "posix"')).to.equal(true); // a legacy spelling PEP 508 keeps
    expect(holds('extra == "CLI_Tools"', 'cli-tools')).to.equal(true);
    expect(holds('extra == "cli"')).to.equal(false);
  });

  it('refuses a marker it cannot read, rather than guessing', () => {
    for (const marker of [
      'python_version >= ',
      'unknown_variable == "x"',
      '(python_version > "3"',
      'python_version "3"',
    ]) {
      expect(() => parseMarker(marker), marker).to.throw(RangeError);
    }
  });
});
