import { readFileSync } from 'node:fs';
import Docker from 'dockerode';
import { SigilError } from '@sigil/plugin-api';
import type { EngineConfig } from './config.ts';

/**
 * The Docker engine this runtime talks to, through dockerode: where it is (for messages), a client
 * for ordinary calls (with a timeout) and one for the calls that stay open as long as a container
 * runs (attach, wait) or as long as a pull takes, which must not time out.
 */
export class Engine {
  /** `unix:///var/run/docker.sock` or `tcp://host:port` (TLS or not): never a credential. */
  readonly address: string;
  /** True for a unix socket: the engine shares this host's files (install roots, egress sockets). */
  readonly local: boolean;
  readonly api: Docker;
  readonly streams: Docker;
  /** Connection options for another process of this host (the watchdog): paths, never key material. */
  readonly connection: EngineConnection;

  constructor(config: EngineConfig) {
    this.connection = engineConnection(config);
    const options = dockerOptions(this.connection);
    this.api = new Docker({ ...options, timeout: config.timeoutMs });
    this.streams = new Docker(options);
    this.local = this.connection.socketPath !== undefined;
    this.address = this.local
      ? `unix://${this.connection.socketPath}`
      : `tcp://${this.connection.host}:${this.connection.port}${this.connection.tls ? ' (TLS)' : ''}`;
  }

  /** The engine's answer to `_ping`, as an `unavailable` error naming the engine and the cause. */
  async ping(): Promise<void> {
    await this.call('answering', () => this.api.ping());
  }

  /**
   * Runs an engine call; a failure to reach the engine becomes `unavailable` (reason
   * `engine_unreachable`) naming it, an error answer `unavailable` (reason `engine_refused`) with the
   * engine's message.
   */
  async call<T>(doing: string, body: () => Promise<T>): Promise<T> {
    try {
      return await body();
    } catch (error) {
      throw this.failure(doing, error);
    }
  }

  failure(doing: string, error: unknown): SigilError {
    const { statusCode, json, code, message } = error as {
      statusCode?: number;
      json?: { message?: string };
      code?: string;
      message?: string;
    };
    if (statusCode !== undefined) {
      return new SigilError(
        'unavailable',
        `the Docker engine at ${this.address} refused ${doing}: ${json?.message ?? message ?? statusCode}`,
        { details: { reason: 'engine_refused', status: statusCode }, cause: error },
      );
    }
    return new SigilError(
      'unavailable',
      `the Docker engine at ${this.address} is not reachable (${doing}): ${code ?? message ?? String(error)}`,
      { details: { reason: 'engine_unreachable', ...(code ? { cause: code } : {}) }, cause: error },
    );
  }
}

export interface EngineConnection {
  socketPath?: string;
  host?: string;
  port?: number;
  /** PEM files of a TLS engine. */
  tls?: { ca: string; cert: string; key: string };
}

/** Where the engine is: the config's `engine`, else `DOCKER_HOST` and its TLS variables, else the default socket. */
function engineConnection(config: EngineConfig): EngineConnection {
  if (config.socketPath) return { socketPath: config.socketPath };
  if (config.host) {
    const tls =
      config.ca && config.cert && config.key
        ? { ca: config.ca, cert: config.cert, key: config.key }
        : undefined;
    return { host: config.host, port: config.port ?? (tls ? 2376 : 2375), ...(tls ? { tls } : {}) };
  }
  const dockerHost = process.env.DOCKER_HOST;
  if (!dockerHost) return { socketPath: '/var/run/docker.sock' };
  if (dockerHost.startsWith('unix://')) return { socketPath: dockerHost.slice('unix://'.length) };
  const url = new URL(dockerHost.includes('://') ? dockerHost : `tcp://${dockerHost}`);
  const certs = process.env.DOCKER_CERT_PATH;
  const tls =
    process.env.DOCKER_TLS_VERIFY === '1' && certs
      ? { ca: `${certs}/ca.pem`, cert: `${certs}/cert.pem`, key: `${certs}/key.pem` }
      : undefined;
  return { host: url.hostname, port: Number(url.port || (tls ? 2376 : 2375)), ...(tls ? { tls } : {}) };
}

/** dockerode's options for `connection`; the TLS files are read here, once. */
export function dockerOptions(connection: EngineConnection): Docker.DockerOptions {
  if (connection.socketPath) return { socketPath: connection.socketPath };
  const { tls } = connection;
  return {
    host: connection.host,
    port: connection.port,
    protocol: tls ? 'https' : 'http',
    ...(tls ? { ca: readFileSync(tls.ca), cert: readFileSync(tls.cert), key: readFileSync(tls.key) } : {}),
  };
}
