import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { PypiRegistryError } from './errors.ts';

/**
 * What the host's Python is, as an installer must know it: the PEP 508 marker environment (which
 * `Requires-Dist` lines apply) and the wheel tags it can import, best first. The server runs with the
 * same interpreter inside the sandbox, so this is asked of it once, not guessed.
 */
export interface PythonHost {
  /** PEP 508 marker variables, `extra` aside. */
  markers: Readonly<Record<string, string>>;
  /** `python_full_version`, for `Requires-Python`. */
  version: string;
  /** `cpython-311`: the tag of the bytecode files this interpreter reads. */
  cacheTag: string;
  /** Supported wheel tags (`py3-none-any`, `cp311-cp311-manylinux_2_17_x86_64`, …), preferred first. */
  tags: readonly string[];
}

/**
 * Run with `-I` (isolated: no user site, no PYTHON* variables) so that what is reported is the
 * interpreter itself. Pure tags come first: a pure wheel is the same file on every host, so a pin made
 * on one host installs the same bytes on another. The platform tags follow pip's order (the
 * interpreter's own ABI, then abi3, then none), with glibc's manylinux levels newest first.
 */
const PROBE = String.raw`
import json, os, platform, sys, sysconfig
def fmt(v):
    s = "%d.%d.%d" % (v.major, v.minor, v.micro)
    return s if v.releaselevel == "final" else s + v.releaselevel[0] + str(v.serial)
impl = sys.implementation
major, minor = sys.version_info[:2]
markers = {
    "implementation_name": impl.name,
    "implementation_version": fmt(impl.version),
    "os_name": os.name,
    "platform_machine": platform.machine(),
    "platform_python_implementation": platform.python_implementation(),
    "platform_release": platform.release(),
    "platform_system": platform.system(),
    "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "python_version": "%d.%d" % (major, minor),
    "sys_platform": sys.platform,
}
pys = ["py%d%d" % (major, m) for m in range(minor, -1, -1)]
interp = ("cp" if impl.name == "cpython" else impl.name[:2]) + "%d%d" % (major, minor)
tags = ["%s-none-any" % interp, pys[0] + "-none-any", "py%d-none-any" % major] + [p + "-none-any" for p in pys[1:]]
plats = []
machine = sysconfig.get_platform().split("-", 1)[-1].replace("-", "_").replace(".", "_")
libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") and sys.platform == "linux" else None
if libc and libc.startswith("glibc "):
    glibc_minor = int(libc.split()[1].split(".")[1])
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    for m in range(glibc_minor, 4, -1):
        plats.append("manylinux_2_%d_%s" % (m, machine))
        if m in legacy and (machine in ("x86_64", "i686") or m == 17):
            plats.append("%s_%s" % (legacy[m], machine))
plats.append(sysconfig.get_platform().replace("-", "_").replace(".", "_"))
abis = []
if impl.name == "cpython":
    abis = [interp + ("d" if hasattr(sys, "gettotalrefcount") else ""), "abi3", "none"]
for abi in abis:
    tags += ["%s-%s-%s" % (interp, abi, p) for p in plats]
if impl.name == "cpython":
    for m in range(minor - 1, 1, -1):
        tags += ["cp%d%d-abi3-%s" % (major, m, p) for p in plats]
for p in pys[:1] + ["py%d" % major] + pys[1:]:
    tags += ["%s-none-%s" % (p, pl) for pl in plats]
print(json.dumps({"markers": markers, "version": markers["python_full_version"], "cacheTag": impl.cache_tag, "tags": tags}))
`;

const run = promisify(execFile);

/** Asks `python` (a command on PATH or a path) what it is; `install_failed` when it cannot be run. */
export async function probePython(python: string): Promise<PythonHost> {
  try {
    const { stdout } = await run(python, ['-I', '-c', PROBE], {
      timeout: 30_000,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    return JSON.parse(stdout) as PythonHost;
  } catch (err) {
    throw new PypiRegistryError(
      'install_failed',
      `the host's Python (${python}) could not be asked what it supports: ${(err as Error).message.split('\n')[0]}`,
      { hint: 'Install python3 (3.8 or newer), or set the plugin option `python` to its path', cause: err },
    );
  }
}
