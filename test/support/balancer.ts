import { spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './cli.ts';
import { ensureDebianPrograms } from './debian.ts';
import { eventually } from './eventually.ts';
import { DEPLOY_NGINX, shippedNginxConfig, type Upstreams } from '../../bin/nginx-config.ts';

/** Debian's nginx (.ci/run installs it; installed here when missing, as root). */
export const NGINX = '/usr/sbin/nginx';

/** One line of the balancer's access log (the `sigil_balancer` format of the template). */
export interface BalancedRequest {
  time: string;
  service: 'runtime' | 'gateway';
  method: string;
  path: string;
  status: number;
  /** The replica that answered; "a, b" when nginx tried a second one after a failed connection. */
  upstream: string;
  upstreamStatus: string;
  requestId: string;
  seconds: number;
}

/**
 * The access log's whole lines: a reader can meet the last line half written (it failed a CI run with
 * "Unterminated string in JSON"), so what follows the last newline waits for the next read.
 */
export function wholeLines(accessLog: string): BalancedRequest[] {
  return accessLog
    .split('\n')
    .slice(0, -1)
    .map((line) => JSON.parse(line) as BalancedRequest);
}

/** nginx started by a test, in front of the replicas, with the shipped configuration. */
export interface Balancer {
  /** The services' address at the balancer: what clients and the replicas' publicUrl use. */
  runtimeUrl: string;
  gatewayUrl: string;
  /** Every request it has answered so far, in order. */
  log(): BalancedRequest[];
  /**
   * The log's lines of the request sent with this X-Request-Id, once there are `count` (1 unless
   * told): nginx writes a line just after the answer's last byte, which the client may have read first.
   */
  requestsWithId(requestId: string, count?: number): Promise<BalancedRequest[]>;
  /** Points the upstreams at other addresses: the template filled again and reloaded (SIGHUP). */
  reload(upstreams: Upstreams): Promise<void>;
  stop(): Promise<void>;
}

/** nginx's exit when one of the ports picked for it was taken meanwhile: picked again. */
class PortTaken extends Error {}

const START_ATTEMPTS = 5;

/**
 * nginx in front of `upstreams` (which need not answer yet), its prefix, configuration, pid file,
 * temp files and logs in a directory of its own, listening on two free loopback ports (nginx cannot
 * take port 0: a port is picked by binding and releasing, and picked again should nginx find it taken).
 * Launched through `setpriv --pdeathsig SIGTERM`, so it stops with the test process even if that is
 * killed.
 */
export async function startBalancer(upstreams: Upstreams): Promise<Balancer> {
  ensureDebianPrograms('the load-balancer tests', [[NGINX, 'nginx']]);
  for (let attempt = 1; ; attempt++) {
    try {
      return await NginxBalancer.start(upstreams, { runtime: await freePort(), gateway: await freePort() });
    } catch (error) {
      if (!(error instanceof PortTaken) || attempt === START_ATTEMPTS) throw error;
    }
  }
}

class NginxBalancer implements Balancer {
  readonly runtimeUrl: string;
  readonly gatewayUrl: string;

  private constructor(
    private readonly dir: string,
    private readonly ports: { runtime: number; gateway: number },
    private readonly nginx: ChildProcess,
    private readonly exited: Promise<void>,
  ) {
    this.runtimeUrl = `http://127.0.0.1:${ports.runtime}`;
    this.gatewayUrl = `http://127.0.0.1:${ports.gateway}`;
  }

  static async start(
    upstreams: Upstreams,
    ports: { runtime: number; gateway: number },
  ): Promise<NginxBalancer> {
    const dir = mkdtempSync(join(tmpdir(), 'sigil-nginx-'));
    // nginx's workers run as nobody: they must reach the temp directories below.
    chmodSync(dir, 0o755);
    cpSync(join(DEPLOY_NGINX, 'snippets'), join(dir, 'snippets'), { recursive: true });
    mkdirSync(join(dir, 'temp'));
    writeFileSync(join(dir, 'nginx.conf'), mainConfig(dir));
    writeSigilConfig(dir, upstreams, ports);
    const nginx = spawn(
      'setpriv',
      [
        '--pdeathsig',
        'SIGTERM',
        NGINX,
        '-p',
        dir,
        '-c',
        join(dir, 'nginx.conf'),
        '-e',
        join(dir, 'error.log'),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    nginx.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<void>((resolve) => nginx.once('close', () => resolve()));
    let gone = false;
    void exited.then(() => (gone = true));
    try {
      await eventually(
        'nginx listening',
        async () => {
          if (gone) {
            const errors = `${stderr}${readIfExists(join(dir, 'error.log'))}`;
            if (errors.includes('Address already in use')) throw new PortTaken(errors);
            throw new Error(`nginx exited: ${errors}`);
          }
          return (await accepts(ports.runtime)) && (await accepts(ports.gateway));
        },
        15_000,
      );
    } catch (error) {
      nginx.kill('SIGKILL');
      await exited;
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
    return new NginxBalancer(dir, ports, nginx, exited);
  }

  log(): BalancedRequest[] {
    return wholeLines(readIfExists(join(this.dir, 'access.log')));
  }

  requestsWithId(requestId: string, count = 1): Promise<BalancedRequest[]> {
    const lines = () => this.log().filter((line) => line.requestId === requestId);
    return eventually(`${count} balancer log line(s) of request ${requestId}`, async () => {
      const found = lines();
      return found.length >= count && found;
    });
  }

  async reload(upstreams: Upstreams): Promise<void> {
    const errorLog = join(this.dir, 'error.log');
    const before = readIfExists(errorLog);
    const oldWorkers = [...before.matchAll(/start worker process (\d+)/g)].map((match) => match[1]);
    writeSigilConfig(this.dir, upstreams, this.ports);
    this.nginx.kill('SIGHUP');
    // The master starts workers with the new configuration (or logs why it kept the old one), and the
    // old workers exit once they have finished what they were answering: from then on every request,
    // also one on a connection kept open, is served with the new configuration.
    await eventually('nginx reloaded', async () => {
      const log = readIfExists(errorLog);
      const since = log.slice(before.length);
      if (since.includes('[emerg]')) throw new Error(`nginx kept its configuration: ${since}`);
      return (
        /start worker process \d+/.test(since) &&
        oldWorkers.every((pid) => log.includes(`worker process ${pid} exited`))
      );
    });
  }

  async stop(): Promise<void> {
    this.nginx.kill('SIGTERM');
    await this.exited;
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The main configuration: nginx's own files in `dir`, and the filled template in its http block. */
function mainConfig(dir: string): string {
  const temp = (name: string) => `${name}_temp_path ${join(dir, 'temp', name)};`;
  return [
    'daemon off;',
    'worker_processes 1;',
    `pid ${join(dir, 'nginx.pid')};`,
    `error_log ${join(dir, 'error.log')} notice;`,
    'events { worker_connections 1024; }',
    'http {',
    ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((name) => `  ${temp(name)}`),
    '  include sigil.conf;',
    `  access_log ${join(dir, 'access.log')} sigil_balancer;`,
    '}',
    '',
  ].join('\n');
}

function writeSigilConfig(
  dir: string,
  upstreams: Upstreams,
  ports: { runtime: number; gateway: number },
): void {
  writeFileSync(
    join(dir, 'sigil.conf'),
    shippedNginxConfig({
      ...upstreams,
      runtimeListen: `127.0.0.1:${ports.runtime}`,
      gatewayListen: `127.0.0.1:${ports.gateway}`,
    }),
  );
}

const readIfExists = (file: string): string => (existsSync(file) ? readFileSync(file, 'utf8') : '');

/** Whether something accepts connections on the loopback port. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
