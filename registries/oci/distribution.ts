import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { isSigilError } from '@sigil/plugin-api';
import { causeOf, denied, RegistryAuth, type RegistryAuthOptions } from './auth.ts';
import { OciIntegrityError, OciRegistryError } from './errors.ts';
import { type Descriptor, MANIFEST_ACCEPT, MAX_MANIFEST_BYTES } from './manifest.ts';
import { DIGEST, type Repository } from './reference.ts';

/**
 * The pull side of the OCI distribution API (v2): manifests and blobs, each checked against its
 * sha256 before a caller sees it. Hand-written on fetch: the npm clients of this API are
 * unmaintained or skip digest checks, and pulling needs only two GETs and the token dance.
 */

/** A manifest's bytes as received, with the digest they hash to. */
export interface FetchedManifest {
  bytes: Buffer;
  contentType: string | null;
  /** `sha256:` of `bytes`; when asked by digest, that digest. */
  digest: string;
}

export const sha256 = (bytes: Buffer): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

export class Distribution {
  private readonly auth: RegistryAuth;

  constructor(private readonly options: RegistryAuthOptions) {
    this.auth = new RegistryAuth(options);
  }

  /**
   * The manifest (or index) `reference` names: a tag, whose bytes must hash to the
   * Docker-Content-Digest the registry states, or a digest, which they must hash to.
   */
  async manifest(repository: Repository, reference: string): Promise<FetchedManifest> {
    const label = DIGEST.test(reference)
      ? `${repository.name}@${reference}`
      : `${repository.name}:${reference}`;
    const response = await this.get(repository, `manifests/${reference}`, label, { accept: MANIFEST_ACCEPT });
    const bytes = await readLimited(
      response,
      MAX_MANIFEST_BYTES,
      label,
      'manifest',
      () =>
        new OciRegistryError(
          'invalid_metadata',
          `${label}: the manifest is larger than ${MAX_MANIFEST_BYTES} bytes`,
          {
            package: label,
          },
        ),
    );
    const digest = sha256(bytes);
    const stated = DIGEST.test(reference) ? reference : response.headers.get('docker-content-digest');
    // A registry may leave the header out; a tag then resolves to what the bytes hash to.
    if (stated !== null && stated !== digest) throw new OciIntegrityError(label, 'manifest', stated, digest);
    return { bytes, contentType: response.headers.get('content-type'), digest };
  }

  /** A blob's bytes in memory (a config): small, and checked before they are returned. */
  async blobBytes(repository: Repository, blob: Descriptor, what: string, label: string): Promise<Buffer> {
    const response = await this.get(repository, `blobs/${blob.digest}`, `${label} (${what})`);
    const bytes = await readLimited(response, blob.size, label, what, () => tooLarge(label, what, blob));
    checkBlob(label, what, blob, bytes.length, sha256(bytes));
    return bytes;
  }

  /**
   * Streams a blob into `file` (which must not exist), hashing on the way; rejects with
   * `integrity_mismatch` when its size or sha256 differ from the descriptor's. The caller removes the
   * file on any rejection. `what` names the blob in errors (`layer 2/3`), `label` the image.
   */
  async blobToFile(
    repository: Repository,
    blob: Descriptor,
    what: string,
    label: string,
    file: string,
  ): Promise<void> {
    const response = await this.get(repository, `blobs/${blob.digest}`, `${label} (${what})`, {}, false);
    const hash = createHash('sha256');
    let size = 0;
    const meter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        size += chunk.length;
        if (size > blob.size) {
          done(tooLarge(label, what, blob));
          return;
        }
        hash.update(chunk);
        done(null, chunk);
      },
    });
    try {
      await pipeline(Readable.fromWeb(bodyOf(response)), meter, createWriteStream(file, { flags: 'wx' }));
    } catch (err) {
      throw isSigilError(err) ? err : unreachable(repository, label, err);
    }
    checkBlob(label, what, blob, size, `sha256:${hash.digest('hex')}`);
  }

  /**
   * A GET answered 2xx, after answering the registry's challenge once. `timed` bounds the whole
   * exchange by the timeout; otherwise only until the headers arrive (a layer may take long).
   */
  private async get(
    repository: Repository,
    path: string,
    label: string,
    headers: Record<string, string> = {},
    timed = true,
  ): Promise<Response> {
    const url = `${repository.origin}/v2/${repository.path}/${path}`;
    const scope = `repository:${repository.path}:pull`;
    let authorization = this.auth.known(repository, scope);
    for (let attempt = 0; ; attempt += 1) {
      const response = await this.send(
        repository,
        url,
        label,
        {
          ...headers,
          ...(authorization === undefined ? {} : { authorization }),
        },
        timed,
      );
      if (response.ok) return response;
      if (response.status !== 401 || attempt > 0) throw await failure(repository, label, response);
      await response.body?.cancel();
      authorization = await this.auth.answer(repository, scope, response.headers.get('www-authenticate'));
    }
  }

  private async send(
    repository: Repository,
    url: string,
    label: string,
    headers: Record<string, string>,
    timed: boolean,
  ): Promise<Response> {
    const abort = new AbortController();
    const timer = setTimeout(
      () => abort.abort(new DOMException('timed out', 'TimeoutError')),
      this.options.timeoutMs,
    );
    try {
      const response = await this.options.fetch(url, { headers, signal: abort.signal });
      if (!timed) clearTimeout(timer);
      return response;
    } catch (err) {
      clearTimeout(timer);
      throw unreachable(repository, label, err);
    } finally {
      // A timed exchange keeps its timer until the body is read; unref'd, it never holds the process.
      timer.unref();
    }
  }
}

function checkBlob(label: string, what: string, blob: Descriptor, size: number, digest: string): void {
  if (digest !== blob.digest) throw new OciIntegrityError(label, what, blob.digest, digest);
  // Only reachable with a sha256 collision: a body of another size hashes to another digest.
  if (size !== blob.size) throw new OciIntegrityError(label, what, `${blob.size} bytes`, `${size} bytes`);
}

function bodyOf(response: Response): ReadableStream<Uint8Array> {
  if (!response.body) throw new OciRegistryError('unavailable', `${response.url} answered without a body`);
  return response.body;
}

const tooLarge = (label: string, what: string, blob: Descriptor): OciIntegrityError =>
  new OciIntegrityError(label, what, `${blob.size} bytes`, `more than ${blob.size} bytes`);

/** The body, refused with `tooLarge()` past `max` bytes, without reading further. */
async function readLimited(
  response: Response,
  max: number,
  label: string,
  what: string,
  tooLarge: () => OciRegistryError,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of Readable.fromWeb(bodyOf(response))) {
      size += (chunk as Buffer).length;
      if (size > max) throw tooLarge();
      chunks.push(chunk as Buffer);
    }
  } catch (err) {
    if (isSigilError(err)) throw err;
    throw new OciRegistryError('unavailable', `${label}: the ${what} could not be read: ${causeOf(err)}`, {
      package: label,
    });
  }
  return Buffer.concat(chunks);
}

const unreachable = (repository: Repository, label: string, err: unknown): OciRegistryError =>
  new OciRegistryError(
    'unavailable',
    `registry ${repository.domain} unreachable for ${label}: ${causeOf(err)}`,
    { package: label },
    { cause: err },
  );

/** The registry's refusal as the contract's reason, with the error codes it gave (`MANIFEST_UNKNOWN`, …). */
async function failure(repository: Repository, label: string, response: Response): Promise<OciRegistryError> {
  const text = await response.text().catch(() => '');
  let codes: string[] = [];
  try {
    const { errors } = JSON.parse(text) as { errors?: { code?: unknown }[] };
    codes = (errors ?? []).flatMap(({ code }) => (typeof code === 'string' ? [code] : []));
  } catch {
    // Not the spec's error body (a proxy's page): the status says enough.
  }
  const said = codes.length > 0 ? ` (${codes.join(', ')})` : '';
  if (response.status === 401 || response.status === 403) {
    return denied(repository, `${repository.domain} denied access to ${label}${said}`);
  }
  if (response.status === 404) {
    return new OciRegistryError('not_found', `${label} is not in ${repository.domain}${said}`, {
      package: label,
      registryErrors: codes,
    });
  }
  return new OciRegistryError(
    'unavailable',
    `registry ${repository.domain} answered ${response.status} for ${label}${said}`,
    { package: label, status: response.status, registryErrors: codes },
  );
}
