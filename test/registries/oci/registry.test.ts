import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { expect } from 'chai';
import type { EntryPoint, ImageLaunch, ResolvedPackage } from '@sigil/plugin-api';
import { list as listTar } from 'tar';
import { ManualClock } from '../../../core/clock.ts';
import { SecretRegistry } from '../../../core/log.ts';
import { PluginHost } from '../../../core/plugins/host.ts';
import { pluginEntrySchema } from '../../../core/config/schema.ts';
import { openDatabase } from '../../../core/db/database.ts';
import { parseChallenge } from '../../../registries/oci/auth.ts';
import { type OciRegistry, ociRegistryConfig } from '../../../registries/oci/index.ts';
import { hostPlatform } from '../../../registries/oci/manifest.ts';
import { builtinPlugins } from '../../../services/builtin-plugins.ts';
import { quietLogger, testCoreServices } from '../../support/kernel.ts';
import { rejectionOf } from '../../support/rejection.ts';
import {
  type BuiltImage,
  buildImage,
  buildIndex,
  type DockerRegistry,
  pushImage,
  pushManifest,
  sha256,
  startDockerRegistry,
  startTamperingProxy,
  startTokenService,
  type TamperingProxy,
  type TokenService,
} from '../../support/oci-registry.ts';
import { tempDir } from '../npm/support.ts';
import { recordingLogger } from '../../support/logs.ts';
import { openOciRegistry } from './support.ts';

const NO_ENTRY: EntryPoint = { args: [] };
const HOST = hostPlatform().architecture;
const OTHER = HOST === 'arm64' ? 'amd64' : 'arm64';

describe('registry-oci against a local distribution registry (docker-registry 2.8)', function () {
  this.timeout(60_000);

  const work = tempDir('registry-oci');
  const cacheDir = (name: string) => join(work.path, 'caches', name);
  let registry: DockerRegistry;
  let echo: BuiltImage;
  let echoDocker: BuiltImage;
  let other: BuiltImage;
  let moved: BuiltImage;
  /** Digests of the indexes pushed, by tag. */
  const indexes: Record<string, string> = {};
  const opened: OciRegistry[] = [];

  /** An instance on this suite's registry, with a cache of its own unless `options` say otherwise. */
  async function openOci(options: Parameters<typeof openOciRegistry>[0] = {}): Promise<OciRegistry> {
    const instance = await openOciRegistry({
      registry: registry.url,
      cacheDir: cacheDir(`c${opened.length}`),
      ...options,
    });
    opened.push(instance);
    return instance;
  }

  before(async () => {
    registry = await startDockerRegistry({ storage: join(work.path, 'storage') });
    const server = { 'srv/server.sh': '#!/bin/sh\necho hello\n' };
    echo = await buildImage({
      layers: [
        {
          ...server,
          'srv/data/greeting.txt': 'hello from a layer\n',
          'usr/bin/echo-server': '#!/bin/sh\nexec /srv/server.sh\n',
          'usr/bin/README': 'not a program\n',
          // Debian's merged /usr: /bin is a link to usr/bin.
          bin: { symlink: 'usr/bin' },
        },
        // Whiteout of srv/data: the upper layer removes the directory the lower one added.
        { 'srv/.wh.data': '', 'srv/late.txt': 'from the upper layer\n' },
      ],
      workingDir: '/srv',
      entrypoint: ['/srv/server.sh'],
      architecture: HOST,
    });
    echoDocker = await buildImage({ layers: [server], format: 'docker', architecture: HOST });
    other = await buildImage({ layers: [server], architecture: OTHER });
    moved = await buildImage({
      layers: [{ 'srv/server.sh': '#!/bin/sh\necho moved\n' }],
      architecture: HOST,
    });
    await pushImage(registry.url, 'mcp/echo', 'v1', echo);
    await pushImage(registry.url, 'mcp/echo', 'moving', echo);
    await pushImage(registry.url, 'mcp/echo-docker', 'v1', echoDocker);
    await pushImage(registry.url, 'mcp/other-arch', 'v1', other);
    await pushImage(registry.url, 'mcp/multi', undefined, echo);
    await pushImage(registry.url, 'mcp/multi', undefined, other);
    // Build tools add attestations as manifests of platform unknown/unknown: never the one to run.
    const attestation = { os: 'unknown', architecture: 'unknown' };
    const multi = buildIndex([
      { image: other, platform: { os: 'linux', architecture: OTHER } },
      { image: echo, platform: { os: 'linux', architecture: HOST } },
      { image: other, platform: attestation },
    ]);
    indexes.v1 = await pushManifest(registry.url, 'mcp/multi', 'v1', multi);
    const list = buildIndex([{ image: echo, platform: { os: 'linux', architecture: HOST } }], 'docker');
    indexes.list = await pushManifest(registry.url, 'mcp/multi', 'list', list);
    const otherOnly = buildIndex([{ image: other, platform: { os: 'linux', architecture: OTHER } }]);
    indexes['other-only'] = await pushManifest(registry.url, 'mcp/multi', 'other-only', otherOnly);
  });

  after(async () => {
    await registry?.stop();
    work.cleanup();
  });

  it('resolves a tag once to the digest of its manifest, as the registry states it', async () => {
    const oci = await openOci();
    expect(await oci.resolve({ name: 'mcp/echo', range: 'v1' })).to.deep.equal({
      name: 'mcp/echo',
      version: 'v1',
      digest: echo.manifest.digest,
    });
    // The digest the registry gave the manifest when it was pushed, and the one it states now.
    const head = await fetch(`${registry.url}/v2/mcp/echo/manifests/v1`, {
      method: 'HEAD',
      headers: { accept: echo.manifest.mediaType },
    });
    expect(head.headers.get('docker-content-digest')).to.equal(echo.manifest.digest);
    // A digest pins itself; a name with the registry's host is the same repository.
    expect(
      await oci.resolve({ name: `${registry.domain}/mcp/echo`, range: echo.manifest.digest }),
    ).to.deep.equal({
      name: `${registry.domain}/mcp/echo`,
      version: echo.manifest.digest,
      digest: echo.manifest.digest,
    });
    expect((await oci.resolve({ name: 'mcp/echo-docker', range: 'v1' })).digest).to.equal(
      echoDocker.manifest.digest,
    );
  });

  it("picks the host's platform from an index (OCI or a Docker manifest list), or the one configured", async () => {
    const oci = await openOci();
    for (const tag of ['v1', 'list']) {
      expect(await oci.resolve({ name: 'mcp/multi', range: tag }), tag).to.deep.equal({
        name: 'mcp/multi',
        version: tag,
        digest: echo.manifest.digest,
      });
    }
    // A digest of an index pins the index; the image run is its platform's.
    expect((await oci.resolve({ name: 'mcp/multi', range: indexes.v1! })).digest).to.equal(
      echo.manifest.digest,
    );
    const foreign = await openOci({ platform: { os: 'linux', architecture: OTHER } });
    expect((await foreign.resolve({ name: 'mcp/multi', range: 'v1' })).digest).to.equal(
      other.manifest.digest,
    );
  });

  it('says not_found for an image of no usable platform, naming those there are', async () => {
    const oci = await openOci();
    const noPlatform = await rejectionOf(oci.resolve({ name: 'mcp/multi', range: 'other-only' }));
    expect(noPlatform.details).to.deep.include({ reason: 'not_found', platforms: [`linux/${OTHER}`] });
    expect(noPlatform.message).to.equal(`mcp/multi:other-only has no image for linux/${HOST}`);
    const single = await rejectionOf(oci.resolve({ name: 'mcp/other-arch', range: 'v1' }));
    expect(single.details).to.include({ reason: 'not_found' });
    expect(single.message).to.contain(`is built for linux/${OTHER}, not linux/${HOST}`);
  });

  it('installs an image as an OCI image layout, every blob verified, and answers a launch pinned by digest', async () => {
    const oci = await openOci();
    const resolved = await oci.resolve({ name: 'mcp/echo', range: 'v1' });
    const installed = await oci.install(resolved, { args: ['--stdio'] });
    const layout = join(oci.cache.entries, echo.manifest.digest.slice('sha256:'.length));
    expect(installed).to.deep.include({ ...resolved, hasInstallScripts: false });
    expect(installed.launch).to.deep.equal({
      kind: 'image',
      image: `${registry.domain}/mcp/echo@${echo.manifest.digest}`,
      args: ['--stdio'],
      layout,
    });
    const blobs = [echo.manifest, echo.config, ...echo.layers];
    expect(installed.sizeBytes).to.equal(blobs.reduce((sum, blob) => sum + blob.bytes.length, 0));

    // The layout an engine loads: oci-layout, index.json naming the manifest, each blob by its digest.
    expect(JSON.parse(readFileSync(join(layout, 'oci-layout'), 'utf8'))).to.deep.equal({
      imageLayoutVersion: '1.0.0',
    });
    const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8')) as { manifests: unknown[] };
    expect(index.manifests).to.deep.equal([
      {
        mediaType: echo.manifest.mediaType,
        digest: echo.manifest.digest,
        size: echo.manifest.bytes.length,
        platform: { os: 'linux', architecture: HOST },
      },
    ]);
    const stored = readdirSync(join(layout, 'blobs', 'sha256'));
    expect(stored.sort()).to.deep.equal(blobs.map((blob) => blob.digest.slice(7)).sort());
    for (const name of stored) {
      expect(sha256(readFileSync(join(layout, 'blobs', 'sha256', name)))).to.equal(`sha256:${name}`);
    }
    // docker load's format, over the same blobs: what a Docker engine before 25 reads.
    const [dockerSave] = JSON.parse(readFileSync(join(layout, 'manifest.json'), 'utf8')) as {
      Config: string;
      Layers: string[];
    }[];
    expect(dockerSave?.Config).to.equal(`blobs/sha256/${echo.config.digest.slice(7)}`);
    expect(dockerSave?.Layers).to.deep.equal(
      echo.layers.map((layer) => `blobs/sha256/${layer.digest.slice(7)}`),
    );
    // Each layer unpacks to the tar whose sha256 the config lists, holding the files put in it.
    const files: string[] = [];
    for (const [i, layer] of echo.layers.entries()) {
      const tar = gunzipSync(readFileSync(join(layout, 'blobs', 'sha256', layer.digest.slice(7))));
      expect(`sha256:${createHash('sha256').update(tar).digest('hex')}`).to.equal(echo.diffIds[i]);
      await new Promise<void>((resolve, reject) => {
        const parser = listTar({ onReadEntry: (entry) => files.push(entry.path) });
        parser.on('end', resolve).on('error', reject).end(tar);
      });
    }
    expect(files).to.include.members(['srv/server.sh', 'srv/data/greeting.txt', 'srv/.wh.data']);

    const status = await oci.cacheStatus();
    expect(status.entries).to.deep.equal([
      {
        name: 'mcp/echo',
        version: 'v1',
        digest: resolved.digest,
        installedAt: installed.installedAt,
        sizeBytes: installed.sizeBytes,
        hasInstallScripts: false,
      },
    ]);
    expect(status.bytes).to.equal(installed.sizeBytes);
  });

  it("starts the entry point named, checked against the image's files: a bin on its PATH, a path, or its own", async () => {
    const oci = await openOci();
    const resolved = await oci.resolve({ name: 'mcp/echo', range: 'v1' });
    const launch = async (entryPoint: EntryPoint) =>
      (await oci.install(resolved, entryPoint)).launch as ImageLaunch;
    expect((await launch({ bin: 'echo-server', args: [] })).entrypoint).to.deep.equal(['echo-server']);
    // A path is read against the image's working directory, through its symlinks.
    expect((await launch({ path: 'server.sh', args: ['-v'] })).entrypoint).to.deep.equal(['/srv/server.sh']);
    expect((await launch({ path: '/bin/echo-server', args: [] })).entrypoint).to.deep.equal([
      '/bin/echo-server',
    ]);
    expect((await launch({ path: 'late.txt', args: [] })).entrypoint).to.deep.equal(['/srv/late.txt']);
    expect(await launch(NO_ENTRY)).to.not.have.property('entrypoint');

    const unknownBin = await rejectionOf(oci.install(resolved, { bin: 'no-such-server', args: [] }));
    expect(unknownBin.details).to.deep.include({
      reason: 'not_found',
      entryPoint: { bin: 'no-such-server' },
    });
    expect(unknownBin.message).to.equal('mcp/echo:v1 has no executable no-such-server on its PATH');
    // Its hint names what the image has: echo-server, found in /usr/bin and /bin; README is not executable.
    expect(unknownBin.hint).to.match(/on its PATH with bin: echo-server$/);
    for (const entryPoint of [{ bin: 'README' }, { path: 'data/greeting.txt' }, { path: '/srv' }]) {
      const err = await rejectionOf(oci.install(resolved, { ...entryPoint, args: [] }));
      expect(err.details, JSON.stringify(entryPoint)).to.include({ reason: 'not_found' });
    }
    const module = await rejectionOf(oci.install(resolved, { module: 'server', args: [] }));
    expect(module.details).to.include({ reason: 'not_found' });
    expect(module.message).to.contain('it is a container image');
    expect((await rejectionOf(oci.install(resolved, { bin: 'a', path: '/b', args: [] }))).code).to.equal(
      'invalid_request',
    );
  });

  it('resolves a moved tag to its new digest under the same version, and still installs the old pin', async () => {
    const oci = await openOci();
    const first = await oci.resolve({ name: 'mcp/echo', range: 'moving' });
    expect(first.digest).to.equal(echo.manifest.digest);
    await oci.install(first, NO_ENTRY);
    await pushImage(registry.url, 'mcp/echo', 'moving', moved);
    const second = await oci.resolve({ name: 'mcp/echo', range: 'moving' });
    expect(second).to.deep.equal({ name: 'mcp/echo', version: 'moving', digest: moved.manifest.digest });
    // What the gateway pinned is still what is installed: the pin, never the tag, names the image.
    const pinned = await oci.install(first, NO_ENTRY);
    expect((pinned.launch as ImageLaunch).image).to.equal(
      `${registry.domain}/mcp/echo@${echo.manifest.digest}`,
    );
    await oci.install(second, NO_ENTRY);
    const versions = (await oci.cacheStatus()).entries.map((entry) => [entry.version, entry.digest]);
    expect(versions).to.have.deep.members([
      ['moving', echo.manifest.digest],
      ['moving', moved.manifest.digest],
    ]);
  });

  it('says not_found for an unknown repository or tag, and refuses names and versions it cannot use', async () => {
    const oci = await openOci();
    const repository = await rejectionOf(oci.resolve({ name: 'mcp/no-such-server', range: 'v1' }));
    expect(repository.details).to.include({ reason: 'not_found' });
    // distribution 2.8 says MANIFEST_UNKNOWN for a repository it has never seen.
    expect(repository.message).to.match(
      new RegExp(`^mcp/no-such-server:v1 is not in ${registry.domain} \\((NAME|MANIFEST)_UNKNOWN\\)$`),
    );
    const tag = await rejectionOf(oci.resolve({ name: 'mcp/echo', range: 'v9' }));
    expect(tag.details).to.include({ reason: 'not_found' });
    expect(tag.message).to.contain('MANIFEST_UNKNOWN');
    const digest = `sha256:${'0'.repeat(64)}`;
    expect(
      (await rejectionOf(oci.install({ name: 'mcp/echo', version: 'v1', digest }, NO_ENTRY))).details,
    ).to.include({ reason: 'not_found' });
    for (const name of ['MCP/Echo', '../etc', 'mcp//echo', '', 'ghcr.io/acme/tool', 'mcp/echo:v1']) {
      expect((await rejectionOf(oci.resolve({ name, range: 'v1' }))).code, name).to.equal('invalid_request');
    }
    for (const range of ['', 'latest?', '-v1', 'sha256:abc', 'a'.repeat(129)]) {
      expect((await rejectionOf(oci.resolve({ name: 'mcp/echo', range }))).code, range).to.equal(
        'invalid_request',
      );
    }
    const unconfigured = await rejectionOf(oci.resolve({ name: 'ghcr.io/acme/tool', range: 'v1' }));
    expect(unconfigured.hint).to.contain('hosts');
    expect(
      (await rejectionOf(oci.install({ name: 'mcp/echo', version: 'v1', digest: 'sha256:x' }, NO_ENTRY)))
        .code,
    ).to.equal('invalid_request');
  });

  it('installs once for parallel callers, and answers again from the cache', async () => {
    const oci = await openOci();
    const resolved = await oci.resolve({ name: 'mcp/echo-docker', range: 'v1' });
    const installs = await Promise.all([1, 2, 3].map(() => oci.install(resolved, NO_ENTRY)));
    expect(new Set(installs.map((installed) => installed.installedAt)).size).to.equal(1);
    expect(await oci.install(resolved, NO_ENTRY)).to.deep.equal(installs[0]);
    expect((await oci.cacheStatus()).entries).to.have.length(1);
    expect(readdirSync(oci.cache.staging)).to.deep.equal([]);
  });

  describe('through a proxy that alters what the registry sends', () => {
    let proxy: TamperingProxy;
    before(async () => {
      proxy = await startTamperingProxy(registry.url);
    });
    afterEach(() => {
      proxy.rewrite = undefined;
    });
    after(() => proxy?.stop());

    const flipped = (body: Buffer) => {
      const copy = Buffer.from(body);
      copy[copy.length - 1] = (copy[copy.length - 1] ?? 0) ^ 1;
      return { body: copy };
    };
    const onlyAt =
      (path: string, change: (body: Buffer) => { body: Buffer; headers?: Record<string, string> }) =>
      (at: string, body: Buffer) => (at === path ? change(body) : undefined);

    async function expectNothingKept(oci: OciRegistry): Promise<void> {
      expect((await oci.cacheStatus()).entries).to.deep.equal([]);
      expect(readdirSync(oci.cache.entries)).to.deep.equal([]);
      expect(readdirSync(oci.cache.staging)).to.deep.equal([]);
      expect(readdirSync(oci.cache.refsDir)).to.deep.equal([]);
    }

    it('refuses an altered layer with integrity_mismatch and keeps nothing', async () => {
      const oci = await openOci({ registry: proxy.url });
      const resolved = await oci.resolve({ name: 'mcp/echo', range: 'v1' });
      const layer = echo.layers[1]!;
      proxy.rewrite = onlyAt(`/v2/mcp/echo/blobs/${layer.digest}`, flipped);
      const err = await rejectionOf(oci.install(resolved, NO_ENTRY));
      expect(err.code).to.equal('conflict');
      expect(err.details).to.include({ reason: 'integrity_mismatch', expected: layer.digest });
      expect(err.message).to.match(/^integrity mismatch for mcp\/echo:v1: the registry's layer 2\/2 sha256:/);
      await expectNothingKept(oci);
      // The registry's own bytes install.
      proxy.rewrite = undefined;
      expect((await oci.install(resolved, NO_ENTRY)).digest).to.equal(echo.manifest.digest);
    });

    it('refuses an altered config or manifest, by tag or by digest', async () => {
      const oci = await openOci({ registry: proxy.url });
      const resolved = await oci.resolve({ name: 'mcp/echo', range: 'v1' });
      for (const path of [
        `/v2/mcp/echo/blobs/${echo.config.digest}`,
        `/v2/mcp/echo/manifests/${echo.manifest.digest}`,
      ]) {
        // Whitespace keeps the JSON valid: only the digest can tell.
        proxy.rewrite = onlyAt(path, (body) => ({ body: Buffer.concat([body, Buffer.from(' ')]) }));
        expect((await rejectionOf(oci.install(resolved, NO_ENTRY))).details, path).to.include({
          reason: 'integrity_mismatch',
        });
        await expectNothingKept(oci);
      }
      // By tag: the bytes must hash to the Docker-Content-Digest the registry states.
      proxy.rewrite = onlyAt('/v2/mcp/echo/manifests/v1', (body) => ({
        body: Buffer.concat([body, Buffer.from('\n')]),
      }));
      const err = await rejectionOf(oci.resolve({ name: 'mcp/echo', range: 'v1' }));
      expect(err.details).to.include({ reason: 'integrity_mismatch', expected: echo.manifest.digest });
    });

    it('refuses a schema 1 manifest as invalid_metadata', async () => {
      const oci = await openOci({ registry: proxy.url });
      const schema1 = Buffer.from(
        JSON.stringify({ schemaVersion: 1, name: 'mcp/echo', tag: 'v1', fsLayers: [] }),
      );
      proxy.rewrite = onlyAt('/v2/mcp/echo/manifests/v1', () => ({
        body: schema1,
        headers: {
          'content-type': 'application/vnd.docker.distribution.manifest.v1+prettyjws',
          'docker-content-digest': sha256(schema1),
        },
      }));
      const err = await rejectionOf(oci.resolve({ name: 'mcp/echo', range: 'v1' }));
      expect(err.details).to.include({ reason: 'invalid_metadata' });
      expect(err.message).to.contain('schema 1');
    });

    it('leaves nothing that looks installed when the process dies mid-download', async () => {
      const dir = join(work.path, 'caches', 'crash');
      const resolved: ResolvedPackage = { name: 'mcp/echo', version: 'v1', digest: echo.manifest.digest };
      const entry = new URL('../../../registries/oci/index.ts', import.meta.url).pathname;
      const script = `
        import manifest from ${JSON.stringify(entry)};
        const plugin = await manifest.create({
          config: manifest.config.parse({ registry: ${JSON.stringify(proxy.url)}, cacheDir: ${JSON.stringify(dir)} }),
          deps: { clock: { now: () => new Date() }, fetch, secrets: { add() {}, remove() {} } },
          logger: (await import('pino')).pino({ level: 'silent' }),
        });
        await plugin.install(${JSON.stringify(resolved)}, { args: [] });`;
      const stalled = proxy.hold(`/v2/mcp/echo/blobs/${echo.layers[0]!.digest}`);
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        cwd: new URL('../../..', import.meta.url).pathname,
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const exited = new Promise((resolve) => child.once('exit', resolve));
      await Promise.race([stalled, exited]);
      child.kill('SIGKILL');
      await exited;
      proxy.release();
      expect(child.signalCode, `the install ended before it could be killed: ${stderr}`).to.equal('SIGKILL');
      expect(readdirSync(join(dir, 'staging'))).to.have.length(1);
      expect(readdirSync(join(dir, 'images'))).to.deep.equal([]);

      const { logger, lines } = recordingLogger();
      const restarted = await openOci({ registry: proxy.url, cacheDir: dir, logger });
      expect((await restarted.cacheStatus()).entries).to.deep.equal([]);
      expect(readdirSync(join(dir, 'staging')), 'leftovers are cleared at start').to.deep.equal([]);
      expect(lines.map((line) => line.msg)).to.include('removed incomplete installs left by an earlier run');
      expect((await restarted.install(resolved, NO_ENTRY)).digest).to.equal(echo.manifest.digest);
    });
  });

  describe('with the authentication of the distribution spec', () => {
    const USERS = { sigil: 'correct horse battery staple' };
    let tokens: TokenService;
    let tokenRegistry: DockerRegistry;
    let closedTokens: TokenService;
    let closedRegistry: DockerRegistry;
    let basicRegistry: DockerRegistry;

    before(async () => {
      // Each serves the storage the open registry was pushed to.
      const storage = registry.storage;
      tokens = await startTokenService({ users: USERS, anonymousPull: true });
      tokenRegistry = await startDockerRegistry({ storage, auth: tokens.auth });
      closedTokens = await startTokenService({ users: USERS, anonymousPull: false });
      closedRegistry = await startDockerRegistry({ storage, auth: closedTokens.auth });
      basicRegistry = await startDockerRegistry({ storage, auth: { htpasswd: USERS } });
    });
    after(async () => {
      await Promise.all([tokenRegistry, closedRegistry, basicRegistry].map((r) => r?.stop()));
      await Promise.all([tokens, closedTokens].map((t) => t?.stop()));
    });

    it('pulls anonymously with a bearer token from the realm the challenge names, kept until it expires', async () => {
      const clock = new ManualClock(new Date());
      const oci = await openOci({ registry: tokenRegistry.url, clock });
      const resolved = await oci.resolve({ name: 'mcp/echo', range: 'v1' });
      expect(resolved.digest).to.equal(echo.manifest.digest);
      await oci.install(resolved, NO_ENTRY);
      expect(tokens.requests).to.deep.equal([{ user: null, scope: 'repository:mcp/echo:pull' }]);
      clock.advance(10 * 60_000);
      await oci.resolve({ name: 'mcp/echo', range: 'v1' });
      expect(tokens.requests, 'a new token once the first expired').to.have.length(2);
    });

    it('sends the configured credentials to the token service, and never shows them', async () => {
      const secrets = new SecretRegistry();
      const { logger, lines } = recordingLogger();
      const credentials = { [closedRegistry.domain]: { username: 'sigil', password: USERS.sigil } };
      const oci = await openOci({ registry: closedRegistry.url, credentials, secrets, logger });
      const resolved = await oci.resolve({ name: 'mcp/echo', range: 'v1' });
      await oci.install(resolved, NO_ENTRY);
      expect(closedTokens.requests.map((request) => request.user)).to.deep.equal(['sigil']);

      const anonymous = await openOci({ registry: closedRegistry.url });
      const refused = await rejectionOf(anonymous.resolve({ name: 'mcp/echo', range: 'v1' }));
      expect(refused.details).to.include({ reason: 'not_found', denied: true });
      expect(refused.message).to.contain('refused an anonymous pull');
      const wrong = await openOci({
        registry: closedRegistry.url,
        credentials: { [closedRegistry.domain]: { username: 'sigil', password: 'wrong password' } },
        logger,
      });
      const err = await rejectionOf(wrong.resolve({ name: 'mcp/echo', range: 'v1' }));
      expect(err.details).to.include({ reason: 'not_found', denied: true });
      expect(err.message).to.contain('refused the configured credentials');
      const shown = JSON.stringify([lines, err.message, err.details, err.hint, refused.message]);
      expect(shown).to.not.contain(USERS.sigil).and.not.contain('wrong password');
      // Registered, so the host's logger scrubs it should it ever slip into a line.
      expect(secrets.scrub(`password ${USERS.sigil}`)).to.not.contain(USERS.sigil);
    });

    it('answers a Basic challenge with the configured credentials, and only with them', async () => {
      const anonymous = await openOci({ registry: basicRegistry.url });
      const err = await rejectionOf(anonymous.resolve({ name: 'mcp/echo', range: 'v1' }));
      expect(err.details).to.include({ reason: 'not_found', denied: true });
      expect(err.message).to.equal(
        `${basicRegistry.domain} asks for credentials for mcp/echo, and none are configured`,
      );
      const oci = await openOci({
        registry: basicRegistry.url,
        credentials: { [basicRegistry.domain]: { username: 'sigil', password: USERS.sigil } },
      });
      const installed = await oci.install(await oci.resolve({ name: 'mcp/echo', range: 'v1' }), NO_ENTRY);
      expect(installed.digest).to.equal(echo.manifest.digest);
    });
  });

  it('parses the challenges registries send', () => {
    expect(
      parseChallenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:mcp/echo:pull,push"',
      ),
    ).to.deep.equal({
      scheme: 'bearer',
      params: {
        realm: 'https://auth.docker.io/token',
        service: 'registry.docker.io',
        scope: 'repository:mcp/echo:pull,push',
      },
    });
    expect(parseChallenge('Basic realm="Registry \\"Realm\\""')).to.deep.equal({
      scheme: 'basic',
      params: { realm: 'Registry "Realm"' },
    });
    expect(parseChallenge('bearer realm=https://r/t, error=insufficient_scope')).to.deep.equal({
      scheme: 'bearer',
      params: { realm: 'https://r/t', error: 'insufficient_scope' },
    });
    expect(parseChallenge('')).to.equal(undefined);
  });

  it('takes plain http only for a loopback registry or one listed as insecure', () => {
    const problems = (options: Record<string, unknown>) =>
      ociRegistryConfig
        .safeParse(options)
        .error?.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    expect(problems({ registry: 'http://registry.example:5000' })).to.deep.equal([
      'registry: plain http is allowed only for a loopback registry or one listed in insecure (registry.example:5000 is neither)',
    ]);
    expect(
      problems({ registry: 'http://registry.example:5000', insecure: ['registry.example:5000'] }),
    ).to.equal(undefined);
    expect(problems({ registry: 'http://127.0.0.1:5000' })).to.equal(undefined);
    expect(problems({ registry: 'https://registry.example/v2/' })).to.deep.equal([
      'registry: an origin, with no path',
    ]);
    expect(problems({ registry: 'ftp://registry.example' })?.[0]).to.match(/^registry: /);
    expect(ociRegistryConfig.parse({}).registry).to.equal('https://registry-1.docker.io');
  });

  it('loads as the built-in plugin registry-oci, serving the registry kind oci', async () => {
    const db = await openDatabase({ url: ':memory:' });
    try {
      const host = new PluginHost({
        builtins: builtinPlugins,
        core: testCoreServices(db),
        logger: quietLogger(),
        baseDir: work.path,
      });
      await host.load([
        pluginEntrySchema.parse({
          resolve: 'registry-oci',
          options: { registry: registry.url, cacheDir: cacheDir('host') },
        }),
      ]);
      expect(host.list().map(({ kind, name, specVersion }) => ({ kind, name, specVersion }))).to.deep.equal([
        { kind: 'package-registry', name: 'registry-oci', specVersion: 'v2' },
      ]);
    } finally {
      await db.destroy();
    }
  });

  // Last (mocha runs a suite's own tests before its nested suites): it stops the registry for good.
  describe('with the registry down', () => {
    it('installs a pinned image offline from the cache; with the registry down, resolves what it installed', async () => {
      const oci = await openOci();
      const resolved = await oci.resolve({ name: 'mcp/echo', range: 'v1' });
      const installed = await oci.install(resolved, NO_ENTRY);
      await registry.stop();
      expect(await oci.install(resolved, NO_ENTRY)).to.deep.equal(installed);

      const { logger, lines } = recordingLogger();
      const restarted = await openOci({ cacheDir: cacheDir(`c${opened.indexOf(oci)}`), logger });
      expect(await restarted.resolve({ name: 'mcp/echo', range: 'v1' })).to.deep.equal(resolved);
      expect(lines.map((line) => line.msg)).to.include(
        'registry unreachable; resolved from the image installed last for this tag',
      );
      expect(await restarted.install(resolved, NO_ENTRY)).to.deep.equal(installed);
      const never = await rejectionOf(restarted.resolve({ name: 'mcp/echo-docker', range: 'v1' }));
      expect(never.details).to.include({ reason: 'unavailable' });
      expect(never.message).to.contain(
        `registry ${registry.domain} unreachable for mcp/echo-docker:v1: ECONNREFUSED`,
      );
      const notCached = await rejectionOf(
        restarted.install({ name: 'mcp/echo', version: 'moving', digest: moved.manifest.digest }, NO_ENTRY),
      );
      expect(notCached.details).to.include({ reason: 'unavailable' });
      expect(existsSync(join(restarted.cache.entries, moved.manifest.digest.slice(7)))).to.equal(false);
    });
  });
});
