import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Docker from 'dockerode';
import { create as createTar, extract as extractTar } from 'tar';
import { probeReadOnlyPaths, SANDBOX_PROBE_FILE } from '@sigil/plugin-api/kit';
import { ensureDebianPrograms } from './debian.ts';
import { fixturePath, repoPath } from './paths.ts';
import { freePort } from './cli.ts';

/**
 * A real Docker engine for tests: Debian's `docker.io` (installed with `runsc` when missing; CI runs
 * as root), its own `dockerd` with a data root, socket and TLS port of its own under
 * {@link ENGINE_DIR}, started in the background when it does not answer and left running for the
 * next test file (as PostgreSQL is), with gVisor registered as the runtime `runsc`. Test images are
 * made with `docker import` of a root filesystem copied from this host: node (this process's) and
 * python3 with their libraries, sh and the probe's tools, the sandbox probe, a bundle of
 * @modelcontextprotocol/server-everything and a plain-Python MCP server.
 *
 *     const engine = await testEngine();
 *     … new DockerRuntime({ config: configSchema.parse({ engine: { socketPath: engine.socketPath }, images: engine.images }) }) …
 */

/** Where the test engine keeps everything; one engine per machine, shared by test files. */
export const ENGINE_DIR = process.env.SIGIL_TEST_DOCKER_DIR ?? '/var/tmp/sigil-test-docker';

/** Paths inside the test images. */
export const IMAGE_PATHS = {
  probe: '/opt/sigil/probe/sandbox-probe.cjs',
  everything: '/opt/sigil/everything/dist/index.mjs',
  pythonServer: '/opt/sigil/python-echo/server.py',
};

export interface TestEngine {
  socketPath: string;
  /** The same engine over TCP with TLS (client certificate files made by the test setup). */
  tls: { host: string; port: number; ca: string; cert: string; key: string };
  docker: Docker;
  /** Local tags of the test images, as the plugin's `images` option takes them. */
  images: { node: string; python: string };
  /** An image with node and the everything bundle but no shell (nor anything else). */
  bare: string;
  /**
   * The `images` option for the sandbox-runtime kit: for node programs, node and sh with the shared
   * libraries of what the kit's probe borrows from this host (probeReadOnlyPaths: find, setpriv,
   * python3 and ctypes) but none of those programs, which the kit binds in itself; so a probe given
   * none sees none (the kit's only-what-it-needs). For python programs, the python image.
   */
  kitImages: { node: string; python: string };
}

let engine: Promise<TestEngine> | undefined;

/** The test engine, started (and its images built) on first use in this process. */
export function testEngine(): Promise<TestEngine> {
  engine ??= startTestEngine();
  return engine;
}

async function startTestEngine(): Promise<TestEngine> {
  installPackages();
  mkdirSync(ENGINE_DIR, { recursive: true, mode: 0o700 });
  const certs = makeCertificates(join(ENGINE_DIR, 'tls'));
  const socketPath = join(ENGINE_DIR, 'docker.sock');
  const portFile = join(ENGINE_DIR, 'tcp-port');
  if (!(await answers(socketPath))) await startDockerd(socketPath, portFile, certs);
  const docker = new Docker({ socketPath });
  const { bare, kitNode, ...images } = await buildImages(docker);
  return {
    bare,
    kitImages: { node: kitNode, python: images.python },
    socketPath,
    tls: { host: '127.0.0.1', port: Number(readFileSync(portFile, 'utf8')), ...certs.client },
    docker,
    images,
  };
}

/** apt-get only when a program is missing: these machines have them, a fresh CI machine may not. */
function installPackages(): void {
  ensureDebianPrograms('the Docker tests', [
    ['/usr/sbin/dockerd', 'docker.io'],
    ['/usr/bin/runsc', 'runsc'],
    ['/usr/bin/docker-registry', 'docker-registry'],
  ]);
}

/** Whether the engine at `socketPath` answers `_ping`. */
async function answers(socketPath: string): Promise<boolean> {
  try {
    await new Docker({ socketPath, timeout: 2000 }).ping();
    return true;
  } catch {
    return false;
  }
}

interface Certificates {
  server: { ca: string; cert: string; key: string };
  client: { ca: string; cert: string; key: string };
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate, made once with openssl. */
function makeCertificates(dir: string): Certificates {
  const file = (name: string) => join(dir, name);
  const certs = {
    server: { ca: file('ca.pem'), cert: file('server-cert.pem'), key: file('server-key.pem') },
    client: { ca: file('ca.pem'), cert: file('cert.pem'), key: file('key.pem') },
  };
  if (existsSync(certs.client.key)) return certs;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { mode: 0o700 });
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  openssl(
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-days',
    '3650',
    '-subj',
    '/CN=sigil-test-ca',
    '-keyout',
    'ca-key.pem',
    '-out',
    'ca.pem',
  );
  const leaf = (name: string, subject: string, extensions: string) => {
    writeFileSync(file(`${name}.ext`), extensions);
    openssl(
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-subj',
      subject,
      '-keyout',
      `${name === 'server' ? 'server-key' : 'key'}.pem`,
      '-out',
      `${name}.csr`,
    );
    openssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca-key.pem',
      '-CAcreateserial',
      '-days',
      '3650',
      '-extfile',
      `${name}.ext`,
      '-out',
      `${name === 'server' ? 'server-cert' : 'cert'}.pem`,
    );
  };
  leaf('server', '/CN=127.0.0.1', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  leaf('client', '/CN=sigil-test-client', 'extendedKeyUsage=clientAuth\n');
  return certs;
}

/**
 * Starts dockerd in the background (a session of its own, so it outlives this process) and waits
 * for its socket to answer. One starter at a time: a lock file, which a starter that died leaves
 * behind for at most a minute.
 */
async function startDockerd(socketPath: string, portFile: string, certs: Certificates): Promise<void> {
  const lock = join(ENGINE_DIR, 'starting.lock');
  let fd: number | undefined;
  try {
    fd = openSync(lock, 'wx');
  } catch {
    if (Date.now() - statSync(lock).mtimeMs > 60_000) rmSync(lock, { force: true });
  }
  if (fd === undefined) {
    if (await waitUntilAnswering(socketPath, 90_000)) return;
    return startDockerd(socketPath, portFile, certs);
  }
  try {
    const port = existsSync(portFile) ? Number(readFileSync(portFile, 'utf8')) : await freePort();
    writeFileSync(portFile, String(port));
    writeFileSync(
      join(ENGINE_DIR, 'daemon.json'),
      JSON.stringify({
        // gVisor on the container's own network namespace (loopback, or the egress forwarder's):
        // its default, a network stack of its own, refuses to start in these VMs, and could not
        // reach the forwarder's loopback anyway.
        runtimes: { runsc: { path: '/usr/bin/runsc', runtimeArgs: ['--network=host'] } },
      }),
    );
    const log = openSync(join(ENGINE_DIR, 'dockerd.log'), 'a');
    const dockerd = spawn(
      '/usr/sbin/dockerd',
      [
        '--config-file',
        join(ENGINE_DIR, 'daemon.json'),
        '--data-root',
        join(ENGINE_DIR, 'data'),
        '--exec-root',
        join(ENGINE_DIR, 'exec'),
        '--pidfile',
        join(ENGINE_DIR, 'docker.pid'),
        '-H',
        `unix://${socketPath}`,
        '-H',
        `tcp://127.0.0.1:${port}`,
        '--tlsverify',
        '--tlscacert',
        certs.server.ca,
        '--tlscert',
        certs.server.cert,
        '--tlskey',
        certs.server.key,
        // Containers here have no network or share a forwarder's loopback: no bridge, no iptables
        // rules that another engine on this machine would fight over.
        '--bridge=none',
        '--iptables=false',
        '--ip-masq=false',
      ],
      { detached: true, stdio: ['ignore', log, log] },
    );
    dockerd.unref();
    closeSync(log);
    if (!(await waitUntilAnswering(socketPath, 90_000))) {
      throw new Error(`dockerd did not answer on ${socketPath}; see ${join(ENGINE_DIR, 'dockerd.log')}`);
    }
  } finally {
    closeSync(fd);
    rmSync(lock, { force: true });
  }
}

async function waitUntilAnswering(socketPath: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await answers(socketPath)) return true;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return false;
}

/** The interpreter a test image runs Python with: Debian's when installed, else this PATH's. */
function python(): { executable: string; stdlib: string; dynload: string; version: string } {
  const executable = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
  const [real, stdlib, dynload, version] = execFileSync(
    executable,
    [
      '-I',
      '-S',
      '-c',
      'import os, sys, sysconfig; print(os.path.realpath(sys.executable)); print(os.path.dirname(os.__file__)); print(sysconfig.get_path("platstdlib") + "/lib-dynload"); print(sys.version)',
    ],
    { encoding: 'utf8' },
  )
    .trim()
    .split('\n') as [string, string, string, string];
  return { executable: real, stdlib, dynload, version };
}

/** The two test images, built when this host's node, python or test programs changed. */
async function buildImages(
  docker: Docker,
): Promise<{ node: string; python: string; bare: string; kitNode: string }> {
  const py = python();
  const bundle = bundleEverything();
  const inputs = [
    process.version,
    py.version,
    readFileSync(SANDBOX_PROBE_FILE),
    readFileSync(fixturePath('mcp', 'python-echo', 'server.py')),
    readFileSync(bundle),
  ];
  const hash = createHash('sha256');
  for (const input of inputs) hash.update(input).update('\0');
  const tag = hash.digest('hex').slice(0, 16);
  const images = {
    node: `sigil-test/node:${tag}`,
    python: `sigil-test/python:${tag}`,
    bare: `sigil-test/bare:${tag}`,
    kitNode: `sigil-test/kit-node:${tag}`,
  };
  await buildImage(docker, images.node, (root) => {
    addProgram(root, process.execPath, '/usr/bin/node');
    addPython(root, py);
    addProbeTools(root);
    addFile(root, SANDBOX_PROBE_FILE, IMAGE_PATHS.probe);
    addFile(root, bundle, IMAGE_PATHS.everything);
    cpSync(
      repoPath('node_modules/@modelcontextprotocol/server-everything/dist/docs'),
      join(root, 'opt/sigil/everything/docs'),
      {
        recursive: true,
      },
    );
  });
  await buildImage(docker, images.python, (root) => {
    addPython(root, py);
    addProgram(root, '/bin/sh', '/bin/sh');
    addFile(root, fixturePath('mcp', 'python-echo', 'server.py'), IMAGE_PATHS.pythonServer);
  });
  await buildImage(docker, images.bare, (root) => {
    addProgram(root, process.execPath, '/usr/bin/node');
    addFile(root, bundle, IMAGE_PATHS.everything);
  });
  await buildImage(docker, images.kitNode, (root) => {
    addProgram(root, process.execPath, '/usr/bin/node');
    addProgram(root, '/bin/sh', '/bin/sh');
    for (const borrowed of probeReadOnlyPaths()) {
      const modules = statSync(borrowed).isDirectory()
        ? execFileSync('find', [borrowed, '-name', '*.so'], { encoding: 'utf8' }).trim().split('\n')
        : [borrowed];
      for (const module of modules) if (module) addLibraries(root, module);
    }
  });
  return images;
}

/** server-everything and its dependencies in one file (esbuild, which tsx brings), for an image without node_modules. */
function bundleEverything(): string {
  const out = join(ENGINE_DIR, 'everything.mjs');
  execFileSync(
    repoPath('node_modules/.bin/esbuild'),
    [
      repoPath('node_modules/@modelcontextprotocol/server-everything/dist/index.js'),
      '--bundle',
      '--platform=node',
      '--format=esm',
      '--log-level=error',
      `--outfile=${out}`,
      "--banner:js=import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    ],
    { stdio: 'pipe' },
  );
  return out;
}

async function buildImage(docker: Docker, reference: string, fill: (root: string) => void): Promise<void> {
  try {
    await docker.getImage(reference).inspect();
    return;
  } catch {
    // not built yet
  }
  const root = mkdtempSync(join(tmpdir(), 'sigil-image-'));
  try {
    chmodSync(root, 0o755);
    mkdirSync(join(root, 'tmp'), { mode: 0o1777 });
    chmodSync(join(root, 'tmp'), 0o1777);
    mkdirSync(join(root, 'etc'));
    writeFileSync(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
    fill(root);
    const [repo, tag] = reference.split(':') as [string, string];
    const tar = createTar({ cwd: root, portable: true }, ['.']) as unknown as NodeJS.ReadableStream;
    const progress = await docker.importImage(tar as never, { repo, tag });
    await new Promise<void>((resolve, reject) =>
      docker.modem.followProgress(progress, (error: Error | null) => (error ? reject(error) : resolve())),
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

function addFile(root: string, source: string, target: string): void {
  mkdirSync(join(root, dirname(target)), { recursive: true });
  copyFileSync(source, join(root, target));
}

/** A program at `target` and every shared library `ldd` names, at the paths it names them. */
function addProgram(root: string, source: string, target: string): void {
  addFile(root, realpathSync(source), target);
  chmodSync(join(root, target), 0o755);
  addLibraries(root, source);
}

function addLibraries(root: string, binary: string): void {
  let listing: string;
  try {
    listing = execFileSync('ldd', [binary], { encoding: 'utf8' });
  } catch {
    return; // static, or not ELF
  }
  for (const match of listing.matchAll(/(?:=>\s*)?(\/\S+)\s+\(0x/g)) {
    const library = match[1] as string;
    if (!existsSync(join(root, library))) addFile(root, realpathSync(library), library);
  }
}

/** The interpreter at its own path (it finds its standard library from there) and at /usr/bin/python3. */
function addPython(root: string, py: ReturnType<typeof python>): void {
  addProgram(root, py.executable, py.executable);
  if (py.executable !== '/usr/bin/python3') {
    mkdirSync(join(root, 'usr/bin'), { recursive: true });
    symlinkSync(py.executable, join(root, 'usr/bin/python3'));
  }
  const skip = new Set([
    'test',
    'idlelib',
    'tkinter',
    'turtledemo',
    'ensurepip',
    'lib2to3',
    '__pycache__',
    'site-packages',
    'dist-packages',
  ]);
  cpSync(py.stdlib, join(root, py.stdlib), {
    recursive: true,
    filter: (source) => !skip.has(source.split('/').pop() as string),
  });
  if (!existsSync(join(root, py.dynload))) cpSync(py.dynload, join(root, py.dynload), { recursive: true });
  for (const module of execFileSync('find', [py.dynload, '-name', '*.so'], { encoding: 'utf8' })
    .trim()
    .split('\n')) {
    if (module) addLibraries(root, module);
  }
}

/** What the sandbox probe borrows (sandbox-probe.cjs): sh, find, true, setpriv, unshare. */
function addProbeTools(root: string): void {
  for (const program of ['/bin/sh', '/usr/bin/find', '/bin/true', '/usr/bin/setpriv', '/usr/bin/unshare']) {
    if (existsSync(program)) addProgram(root, program, program);
  }
}

/**
 * An OCI image layout of `reference` (made from `docker save`): its blobs, a manifest and an index.
 * Returns the layout's directory and the manifest's digest, which pins the image.
 */
export async function ociLayoutOf(
  docker: Docker,
  reference: string,
  dir: string,
): Promise<{ layout: string; digest: string }> {
  const saved = mkdtempSync(join(tmpdir(), 'sigil-save-'));
  try {
    const archive = await docker.getImage(reference).get();
    await new Promise<void>((resolve, reject) => {
      const extract = extractTar({ cwd: saved });
      archive.pipe(extract as unknown as NodeJS.WritableStream);
      extract.on('finish', () => resolve());
      extract.on('error', reject);
    });
    const [saveManifest] = JSON.parse(readFileSync(join(saved, 'manifest.json'), 'utf8')) as {
      Config: string;
      Layers: string[];
    }[];
    if (!saveManifest) throw new Error(`docker save of ${reference} has no manifest`);
    mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
    const blob = (bytes: Buffer) => {
      const hex = createHash('sha256').update(bytes).digest('hex');
      writeFileSync(join(dir, 'blobs', 'sha256', hex), bytes);
      return { digest: `sha256:${hex}`, size: bytes.length };
    };
    const config = blob(readFileSync(join(saved, saveManifest.Config)));
    const layers = saveManifest.Layers.map((layer) => blob(readFileSync(join(saved, layer))));
    const manifest = blob(
      Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
          layers: layers.map((layer) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar', ...layer })),
        }),
      ),
    );
    writeFileSync(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    writeFileSync(
      join(dir, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', ...manifest }],
      }),
    );
    return { layout: dir, digest: manifest.digest };
  } finally {
    rmSync(saved, { recursive: true, force: true });
  }
}

export interface TestRegistry {
  /** `127.0.0.1:<port>`, which the engine trusts over plain HTTP (as every loopback registry). */
  host: string;
  /**
   * Pushes the local image `source` as `<host>/<repository>:<tag>` and then removes every name of it
   * that came from this registry, so the engine must pull it again; returns `<host>/<repository>@<digest>`.
   */
  pushAndForget(docker: Docker, source: string, repository: string): Promise<string>;
  stop(): Promise<void>;
}

/** Debian's docker-registry (an OCI distribution registry) on loopback, its storage in a temp directory. */
export async function startRegistry(): Promise<TestRegistry> {
  installPackages();
  const dir = mkdtempSync(join(tmpdir(), 'sigil-registry-'));
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  writeFileSync(
    join(dir, 'config.yml'),
    [
      'version: 0.1',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${join(dir, 'data')}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: ${host}`,
      '',
    ].join('\n'),
  );
  const registry = spawn('/usr/bin/docker-registry', ['serve', join(dir, 'config.yml')], { stdio: 'ignore' });
  const deadline = Date.now() + 30_000;
  while (
    !(await fetch(`http://${host}/v2/`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (Date.now() > deadline || registry.exitCode !== null) throw new Error('docker-registry did not start');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    host,
    async pushAndForget(docker, source, repository) {
      const tag = 'pushed';
      const name = `${host}/${repository}`;
      await docker.getImage(source).tag({ repo: name, tag });
      const progress = (await docker
        .getImage(`${name}:${tag}`)
        .push({ authconfig: {} } as never)) as unknown as NodeJS.ReadableStream;
      const events = await new Promise<{ aux?: { Digest?: string }; error?: string }[]>((resolve, reject) =>
        docker.modem.followProgress(
          progress,
          (error: Error | null, output: { aux?: { Digest?: string }; error?: string }[]) =>
            error ? reject(error) : resolve(output),
        ),
      );
      const failed = events.find((event) => event.error);
      if (failed) throw new Error(`push of ${name}: ${failed.error}`);
      const digest = events.find((event) => event.aux?.Digest)?.aux?.Digest;
      if (!digest) throw new Error(`push of ${name} reported no digest`);
      await docker.getImage(`${name}:${tag}`).remove();
      // Untagging the last tag of the repository may take its digest name with it.
      await docker
        .getImage(`${name}@${digest}`)
        .remove()
        .catch((error: { statusCode?: number }) => {
          if (error.statusCode !== 404) throw error;
        });
      return `${name}@${digest}`;
    },
    async stop() {
      registry.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
