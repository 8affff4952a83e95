import { execFile as execFileCb, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import bcrypt from 'bcryptjs';
import { importPKCS8, SignJWT } from 'jose';
import { create as createTar } from 'tar';
import { processTempDir } from './paths.ts';
import { ensureDebianPrograms } from './debian.ts';

/**
 * A real OCI distribution registry for tests: Debian's `docker-registry` (the distribution project's
 * registry 2.8) on 127.0.0.1 and a port it picks, with filesystem storage in a temp directory, and
 * the two things a registry needs around it: images to serve, built here without any Docker engine
 * and pushed with the distribution API, and, for the auth tests, a token service (the distribution
 * token spec, JWTs signed by a throwaway certificate the registry trusts) or an htpasswd file.
 *
 *     const registry = await startDockerRegistry();
 *     const image = await buildImage({ files: { 'srv/hello.txt': 'hi' } });
 *     await pushImage(registry.url, 'mcp/echo', 'v1', image);
 *     … registry.stop();
 */

const execFile = promisify(execFileCb);
const REGISTRY_BIN = '/usr/bin/docker-registry';

const work = () => processTempDir('oci');

/** Installs Debian's docker-registry when it is missing (CI runs as root on a fresh machine). */
function ensureDockerRegistry(): void {
  ensureDebianPrograms('the OCI registry tests', [[REGISTRY_BIN, 'docker-registry']]);
}

export type RegistryAuth =
  | { htpasswd: Record<string, string> }
  | { token: { realm: string; service: string; issuer: string; certificate: string } };

export interface DockerRegistry {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** `127.0.0.1:<port>`: how image names write the registry. */
  domain: string;
  storage: string;
  /** Stops the registry (SIGTERM, SIGKILL after 5 s); its storage stays for another registry to serve. */
  stop(): Promise<void>;
}

/**
 * Starts a registry and resolves once it listens. Registries given the same `storage` serve the same
 * repositories, so one open registry can take the pushes that an authenticated one then serves.
 */
export async function startDockerRegistry(
  options: { storage?: string; auth?: RegistryAuth } = {},
): Promise<DockerRegistry> {
  ensureDockerRegistry();
  const root = mkdtempSync(join(work(), 'registry-'));
  const storage = options.storage ?? join(root, 'storage');
  const config = [
    'version: 0.1',
    // info, for the "listening on" line that says which port it took; one JSON object a line.
    'log: { level: info, formatter: json, accesslog: { disabled: true } }',
    `storage: { filesystem: { rootdirectory: ${JSON.stringify(storage)} }, delete: { enabled: true } }`,
    `http: { addr: "127.0.0.1:0", secret: ${JSON.stringify(randomBytes(16).toString('hex'))} }`,
    ...(await authConfig(root, options.auth)),
  ].join('\n');
  writeFileSync(join(root, 'config.yml'), `${config}\n`);

  const child = spawn(REGISTRY_BIN, ['serve', join(root, 'config.yml')], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  let log = '';
  const domain = await new Promise<string>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      log = (log + chunk.toString()).slice(-16_000);
      const listening = /"msg":"listening on (127\.0\.0\.1:\d+)"/.exec(log);
      if (listening?.[1]) resolve(listening[1]);
    });
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      reject(new Error(`docker-registry exited (${code ?? signal}): ${log}`)),
    );
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    url: `http://${domain}`,
    domain,
    storage,
    stop: async () => {
      process.removeListener('exit', killOnExit);
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function authConfig(root: string, auth: RegistryAuth | undefined): Promise<string[]> {
  if (!auth) return [];
  if ('htpasswd' in auth) {
    const file = join(root, 'htpasswd');
    const lines = Object.entries(auth.htpasswd).map(
      ([user, password]) => `${user}:${bcrypt.hashSync(password, 4)}`,
    );
    await writeFile(file, `${lines.join('\n')}\n`);
    return [`auth: { htpasswd: { realm: sigil-test, path: ${JSON.stringify(file)} } }`];
  }
  const { realm, service, issuer, certificate } = auth.token;
  return [
    `auth: { token: { realm: ${JSON.stringify(realm)}, service: ${JSON.stringify(service)}, issuer: ${JSON.stringify(issuer)}, rootcertbundle: ${JSON.stringify(certificate)} } }`,
  ];
}

export interface TokenService {
  /** What a registry's `auth.token` needs to trust this service. */
  auth: RegistryAuth & { token: unknown };
  /** Token requests so far: who asked (a user, or null when anonymous) and for what scope. */
  requests: { user: string | null; scope: string | null }[];
  stop(): Promise<void>;
}

/**
 * A token service as the distribution token spec describes it: `GET /token?service=…&scope=…`,
 * optionally with Basic credentials, answered with a JWT the registry verifies against the
 * certificate in its `rootcertbundle` (here, a self-signed one made with `openssl`). Users get pull
 * and push; an anonymous caller gets pull when `anonymousPull`, and a 401 otherwise.
 */
export async function startTokenService(options: {
  users: Record<string, string>;
  anonymousPull: boolean;
}): Promise<TokenService> {
  const dir = mkdtempSync(join(work(), 'token-'));
  const keyFile = join(dir, 'key.pem');
  const certificate = join(dir, 'cert.pem');
  await execFile('openssl', [
    ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
    ...['-keyout', keyFile, '-out', certificate, '-days', '2', '-subj', '/CN=sigil-test-token-service'],
  ]);
  const key = await importPKCS8(await readFile(keyFile, 'utf8'), 'ES256');
  const der = readFileSync(certificate, 'utf8').replace(/-----[A-Z ]+-----|\s/g, '');
  const issuer = 'sigil-test-token-service';
  const service = 'sigil-test-registry';
  const requests: TokenService['requests'] = [];

  const server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://token');
      const scope = url.searchParams.get('scope');
      const user = basicUser(req, options.users);
      requests.push({ user: user === false ? '(refused)' : (user ?? null), scope });
      if (user === false || (user === undefined && !options.anonymousPull)) {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="sigil-test-token-service"' }).end();
        return;
      }
      const [, name, actions = ''] = /^repository:(.+):([a-z,*]+)$/.exec(scope ?? '') ?? [];
      const granted = actions.split(',').filter((action) => action === 'pull' || user !== undefined);
      const token = await new SignJWT({
        access: name ? [{ type: 'repository', name, actions: granted }] : [],
      })
        .setProtectedHeader({ alg: 'ES256', x5c: [der] })
        .setIssuer(issuer)
        .setAudience(url.searchParams.get('service') ?? '')
        .setSubject(user ?? '')
        .setIssuedAt()
        .setNotBefore('-10s')
        .setExpirationTime('5m')
        .setJti(randomBytes(8).toString('hex'))
        .sign(key);
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ token, expires_in: 300 }));
    })();
  });
  const url = await listen(server);
  return {
    auth: { token: { realm: `${url}/token`, service, issuer, certificate } },
    requests,
    stop: () => close(server),
  };
}

/** The user of a request's Basic credentials: undefined without any, false when they are wrong. */
function basicUser(req: IncomingMessage, users: Record<string, string>): string | false | undefined {
  const header = req.headers.authorization;
  if (!header?.startsWith('Basic ')) return undefined;
  const [user = '', ...rest] = Buffer.from(header.slice(6), 'base64').toString().split(':');
  return users[user] !== undefined && users[user] === rest.join(':') ? user : false;
}

/** What a proxy sends instead of a response body, with headers to replace. */
export interface Rewritten {
  body: Buffer;
  headers?: Record<string, string>;
}

/**
 * An HTTP proxy in front of a registry that hands each response body to `rewrite` (by request path)
 * before passing it on, status and headers unchanged but for the length and those `rewrite` gives:
 * what a registry serving other bytes than it names looks like. `rewrite` returning undefined passes
 * the body through. `hold(path)` makes the proxy send the headers and half the body of that path,
 * then stall until `release()`; it resolves when the proxy has stalled.
 */
export interface TamperingProxy {
  url: string;
  domain: string;
  rewrite: ((path: string, body: Buffer) => Rewritten | undefined) | undefined;
  hold(path: string): Promise<void>;
  release(): void;
  stop(): Promise<void>;
}

export async function startTamperingProxy(upstream: string): Promise<TamperingProxy> {
  let holding: { path: string; held: () => void; released: Promise<void>; release: () => void } | undefined;
  const proxy: Omit<TamperingProxy, 'url' | 'domain' | 'stop'> = {
    rewrite: undefined,
    hold: (path) =>
      new Promise<void>((held) => {
        let release = () => {};
        const released = new Promise<void>((resolve) => (release = resolve));
        holding = { path, held, released, release };
      }),
    release: () => {
      holding?.release();
      holding = undefined;
    },
  };
  const server = createServer((req, res) => {
    const target = new URL(req.url ?? '/', upstream);
    const forward = httpRequest(
      target,
      { method: req.method, headers: { ...req.headers, host: target.host } },
      (up) => {
        const chunks: Buffer[] = [];
        up.on('data', (chunk: Buffer) => chunks.push(chunk));
        up.on('end', () => {
          void (async () => {
            const original = Buffer.concat(chunks);
            const rewritten = proxy.rewrite?.(target.pathname, original);
            const body = rewritten?.body ?? original;
            const headers = { ...up.headers, ...rewritten?.headers, 'content-length': String(body.length) };
            delete headers['transfer-encoding'];
            res.writeHead(up.statusCode ?? 502, headers);
            const hold = holding?.path === target.pathname ? holding : undefined;
            if (hold) {
              res.write(body.subarray(0, body.length >> 1));
              hold.held();
              await hold.released;
            }
            res.end(hold ? body.subarray(body.length >> 1) : body);
          })();
        });
      },
    );
    forward.on('error', () => res.writeHead(502).end());
    req.pipe(forward);
  });
  const url = await listen(server);
  return Object.assign(proxy, { url, domain: new URL(url).host, stop: () => close(server) });
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

// ---- images, built without a Docker engine and pushed with the distribution API ----

export const MEDIA = {
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  ociLayer: 'application/vnd.oci.image.layer.v1.tar+gzip',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  dockerLayer: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
} as const;

export const sha256 = (bytes: Buffer): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

export interface Blob {
  mediaType: string;
  bytes: Buffer;
  digest: string;
}

export interface BuiltImage {
  /** The manifest as pushed: its digest is the image's. */
  manifest: Blob;
  config: Blob;
  layers: Blob[];
  /** sha256 of each layer's uncompressed tar, as the config's `rootfs.diff_ids` lists them. */
  diffIds: string[];
}

const blob = (mediaType: string, bytes: Buffer): Blob => ({ mediaType, bytes, digest: sha256(bytes) });
const descriptor = ({ mediaType, bytes, digest }: Blob) => ({ mediaType, digest, size: bytes.length });

/** A layer's files by path: a file's content (executable when it starts with `#!`), or a symlink. */
export type LayerFiles = Record<string, string | { symlink: string }>;

/**
 * An image of one layer per entry of `layers` (each a gzipped tar of the files given), its config
 * and its manifest, in the OCI formats or Docker's schema 2 ones. A file named `.wh.<name>` is the
 * image spec's whiteout of `<name>` in the layers below.
 */
export async function buildImage(options: {
  layers: LayerFiles[];
  architecture?: string;
  format?: 'oci' | 'docker';
  workingDir?: string;
  entrypoint?: string[];
}): Promise<BuiltImage> {
  const docker = options.format === 'docker';
  const tars = await Promise.all(options.layers.map(tarOf));
  const layers = tars.map((tar) => blob(docker ? MEDIA.dockerLayer : MEDIA.ociLayer, gzipSync(tar)));
  const diffIds = tars.map(sha256);
  const config = blob(
    docker ? MEDIA.dockerConfig : MEDIA.ociConfig,
    Buffer.from(
      JSON.stringify({
        architecture: options.architecture ?? 'amd64',
        os: 'linux',
        config: {
          Env: ['PATH=/usr/local/bin:/usr/bin:/bin'],
          ...(options.entrypoint ? { Entrypoint: options.entrypoint } : {}),
          ...(options.workingDir ? { WorkingDir: options.workingDir } : {}),
        },
        rootfs: { type: 'layers', diff_ids: diffIds },
      }),
    ),
  );
  const mediaType = docker ? MEDIA.dockerManifest : MEDIA.ociManifest;
  const manifest = blob(
    mediaType,
    Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType,
        config: descriptor(config),
        layers: layers.map(descriptor),
      }),
    ),
  );
  return { manifest, config, layers, diffIds };
}

/** An uncompressed tar of `files`, made by the `tar` package from a temp directory. */
async function tarOf(files: LayerFiles): Promise<Buffer> {
  const dir = mkdtempSync(join(work(), 'layer-'));
  const root = join(dir, 'root');
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(root, path, '..'), { recursive: true });
    if (typeof content === 'string') {
      await writeFile(join(root, path), content, { mode: content.startsWith('#!') ? 0o755 : 0o644 });
    } else await symlink(content.symlink, join(root, path));
  }
  const file = join(dir, 'layer.tar');
  await createTar({ cwd: root, file, portable: true }, Object.keys(files).sort());
  return readFile(file);
}

/** An index of `images`, each with its platform, in the OCI format or as a Docker manifest list. */
export function buildIndex(
  images: { image: BuiltImage | Blob; platform: { os: string; architecture: string; variant?: string } }[],
  format: 'oci' | 'docker' = 'oci',
): Blob {
  const mediaType = format === 'docker' ? MEDIA.dockerList : MEDIA.ociIndex;
  const manifests = images.map(({ image, platform }) => ({
    ...descriptor('manifest' in image ? image.manifest : image),
    platform,
  }));
  return blob(mediaType, Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType, manifests })));
}

/** Pushes a blob with a monolithic upload (POST, then PUT with the digest). */
export async function pushBlob(registry: string, repository: string, { bytes, digest }: Blob): Promise<void> {
  const started = await fetch(`${registry}/v2/${repository}/blobs/uploads/`, { method: 'POST' });
  const location = started.headers.get('location');
  if (started.status !== 202 || !location)
    throw new Error(`upload to ${repository} refused: ${started.status}`);
  const upload = new URL(location, registry);
  upload.searchParams.set('digest', digest);
  const put = await fetch(upload, {
    method: 'PUT',
    headers: { 'content-type': 'application/octet-stream' },
    body: bytes,
  });
  if (put.status !== 201) throw new Error(`blob ${digest} refused: ${put.status} ${await put.text()}`);
}

/** Puts a manifest or index under `reference` (a tag or its digest); answers the digest the registry gives it. */
export async function pushManifest(
  registry: string,
  repository: string,
  reference: string,
  manifest: Blob,
): Promise<string> {
  const put = await fetch(`${registry}/v2/${repository}/manifests/${reference}`, {
    method: 'PUT',
    headers: { 'content-type': manifest.mediaType },
    body: manifest.bytes,
  });
  if (put.status !== 201) throw new Error(`manifest ${reference} refused: ${put.status} ${await put.text()}`);
  return put.headers.get('docker-content-digest') ?? '';
}

/** Pushes an image's blobs, then its manifest under `tag` (or by digest alone without one). */
export async function pushImage(
  registry: string,
  repository: string,
  tag: string | undefined,
  image: BuiltImage,
): Promise<string> {
  for (const item of [...image.layers, image.config]) await pushBlob(registry, repository, item);
  return pushManifest(registry, repository, tag ?? image.manifest.digest, image.manifest);
}
