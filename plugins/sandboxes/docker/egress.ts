import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import { SigilError } from '@sigil/plugin-api';
import type { ContainerLimits, DockerSandboxConfig } from './config.ts';
import { hardenedContainer, readOnlyBind, type Hardening } from './container-config.ts';
import type { EgressAddresses } from '@sigil/plugin-api/egress';
import { EgressProxy } from '@sigil/plugin-api/egress';
import type { Engine } from './engine.ts';
import { LABELS } from './owner.ts';
import { createClaiming } from './uids.ts';

/**
 * The way out of a container with an allow-list. The server's container has no network of its own:
 * it joins the network namespace of a forwarder container (network `none`: loopback only), which
 * listens on 127.0.0.1:<proxyPort> (what HTTP_PROXY names) and pipes each connection through a unix
 * socket, bound into the forwarder alone, to an {@link EgressProxy} in this process that allows only
 * the listed `host:port` pairs. Nothing else leaves: no interface but loopback, no route, no DNS.
 * A per-sandbox bridge network would instead give the container the host's bridge address (and
 * every host service listening on all addresses), and each one takes an address pool of the engine.
 *
 * The socket must be on the engine's host: allow-lists need a local engine.
 */

const FORWARDER = fileURLToPath(new URL('./egress-forwarder.cjs', import.meta.url));
const MiB = 1024 * 1024;
/** The proxy's socket in the sandbox's egress directory: short, as a socket's path must be (107 bytes). */
const SOCKET = 'sock';
/** How long the forwarder may take to listen. */
const READY_TIMEOUT_MS = 30_000;

export interface Egress {
  /** The server container's network mode: the forwarder's namespace. */
  networkMode: string;
  /** HTTP_PROXY and friends for the server. */
  env: string[];
  release(): Promise<void>;
}

export interface EgressInput {
  engine: Engine;
  config: DockerSandboxConfig;
  addresses: EgressAddresses;
  /** This sandbox's own directory for the socket (removed on release). */
  dir: string;
  allowList: readonly string[];
  limits: ContainerLimits;
  /** The forwarder's image (resolved) and the server's hardening, which the forwarder shares. */
  image: string;
  hardening: Hardening;
  onDenied: (target: string) => void;
}

export async function startEgress(input: EgressInput): Promise<Egress> {
  const { engine, config } = input;
  if (!engine.local) {
    throw new SigilError(
      'unavailable',
      `a network allow-list needs a local Docker engine (the egress proxy's socket is bound into the container); ${engine.address} is remote`,
      { details: { reason: 'egress_needs_local_engine' } },
    );
  }
  mkdirSync(input.dir, { recursive: true, mode: 0o755 });
  const proxy = new EgressProxy({
    socketPath: join(input.dir, SOCKET),
    allowList: input.allowList,
    addresses: input.addresses,
    maxConnections: input.limits.egressConnections,
    headerTimeoutMs: config.egress.headerTimeoutMs,
    idleTimeoutMs: config.egress.idleTimeoutMs,
    onDenied: input.onDenied,
  });
  let forwarder: Docker.Container | undefined;
  const release = async () => {
    await forwarder?.remove({ force: true }).catch(() => undefined);
    await proxy.close();
    rmSync(input.dir, { recursive: true, force: true });
  };
  try {
    await proxy.listen();
    const port = config.egress.proxyPort;
    // The forwarder is the sandbox's first container: it claims the uid both run as.
    forwarder = await createClaiming(
      engine,
      input.hardening.uid,
      'to create the egress forwarder',
      hardenedContainer(
        {
          ...input.hardening,
          // It runs no server code: a small share, on the engine's default runtime, whose loopback
          // is the one the server's runtime joins.
          limits: {
            ...input.limits,
            memoryBytes: 64 * MiB,
            pids: 16,
            tmpBytes: MiB,
            // Two per connection of the server, which the proxy, not this, must refuse (503).
            openFiles: 2 * input.limits.openFiles + 32,
          },
          runtime: 'runc',
          networkMode: 'none',
          labels: { ...input.hardening.labels, [LABELS.role]: 'egress' },
        },
        {
          image: input.image,
          entrypoint: ['node', '/sigil-egress-forwarder.cjs', String(port), `/sigil-egress/${SOCKET}`],
          cmd: [],
          workingDir: '/',
          env: [],
          mounts: [
            { ...readOnlyBind(FORWARDER), Target: '/sigil-egress-forwarder.cjs' },
            { ...readOnlyBind(input.dir), Target: '/sigil-egress' },
          ],
          stdin: false,
        },
      ),
    );
    await ready(engine, forwarder);
    const url = `http://127.0.0.1:${port}`;
    return {
      networkMode: `container:${forwarder.id}`,
      env: ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy'].map((name) => `${name}=${url}`),
      release,
    };
  } catch (error) {
    await release();
    throw error;
  }
}

/** Starts the forwarder and waits for its `listening` line. */
async function ready(engine: Engine, forwarder: Docker.Container): Promise<void> {
  const output = (await engine.call('to attach to the egress forwarder', () =>
    engine.streams.getContainer(forwarder.id).attach({ stream: true, stdout: true, stderr: true }),
  )) as unknown as NodeJS.ReadableStream & { destroy(): void };
  const out = new PassThrough();
  const err = new PassThrough();
  engine.streams.modem.demuxStream(output, out, err);
  let said = '';
  let complaint = '';
  err.on('data', (chunk: Buffer) => (complaint += chunk.toString()));
  const listening = new Promise<boolean>((resolve) => {
    out.on('data', (chunk: Buffer) => {
      said += chunk.toString();
      if (said.includes('listening\n')) resolve(true);
    });
    output.once('end', () => resolve(false));
    output.once('close', () => resolve(false));
    setTimeout(() => resolve(false), READY_TIMEOUT_MS).unref();
  });
  try {
    await engine.call('to start the egress forwarder', () => forwarder.start());
    if (!(await listening)) {
      throw new SigilError(
        'unavailable',
        `the egress forwarder did not start: ${complaint.trim() || 'no answer'} (it runs node from the configured egress image)`,
        { details: { reason: 'egress_forwarder' } },
      );
    }
  } finally {
    output.destroy();
  }
}
