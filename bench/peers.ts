/**
 * The gateway's peers in the gateway-mcp suite: other programs that put one stdio MCP server behind
 * Streamable HTTP, each run from the npm package in node_modules (devDependencies) as its README says,
 * in each of its modes, with the same installed server the gateway runs (as a plain process: neither
 * sandboxes it).
 *
 * - supergateway 4 (`--outputTransport streamableHttp`): stateless by default, a server process started
 *   for every POST and initialized by supergateway; `--stateful`, one server process per session.
 *   `--logLevel none`: at its default `info` it logs every message both ways.
 * - mcp-proxy 6 (`--server stream`): one server process for all, stateful sessions by default (each a
 *   server instance of the SDK in the proxy, with its resumability event store), `--stateless` a server
 *   instance per request. Otherwise its defaults.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { Agent } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../test/support/cli.ts';
import { repoPath } from '../test/support/paths.ts';
import { HandshakeRefused, initializeSession, postJson } from './mcp-http.ts';

export interface Peer {
  /** As the rows name it: the program and its mode. */
  name: string;
  /** The command line after `node <bin>`, serving `server` (a command and its arguments) on `port`. */
  args(port: number, server: readonly string[]): string[];
  bin: string;
  /** Starts a server process per request: its load runs take fewer calls. */
  processPerRequest?: boolean;
}

const supergatewayBin = repoPath('node_modules', 'supergateway', 'dist', 'index.js');
const mcpProxyBin = repoPath('node_modules', 'mcp-proxy', 'dist', 'bin', 'mcp-proxy.mjs');
/** supergateway runs its `--stdio` command through a shell. */
const shellCommand = (server: readonly string[]) => server.map((arg) => `'${arg}'`).join(' ');

export const peers: Peer[] = [
  {
    name: 'supergateway, stateless',
    bin: supergatewayBin,
    processPerRequest: true,
    args: (port, server) => [
      '--stdio',
      shellCommand(server),
      '--outputTransport',
      'streamableHttp',
      '--port',
      String(port),
      '--logLevel',
      'none',
    ],
  },
  {
    name: 'supergateway, stateful',
    bin: supergatewayBin,
    args: (port, server) => [
      '--stdio',
      shellCommand(server),
      '--outputTransport',
      'streamableHttp',
      '--stateful',
      '--port',
      String(port),
      '--logLevel',
      'none',
    ],
  },
  {
    name: 'mcp-proxy, stateful',
    bin: mcpProxyBin,
    args: (port, server) => ['--port', String(port), '--server', 'stream', '--', ...server],
  },
  {
    name: 'mcp-proxy, stateless',
    bin: mcpProxyBin,
    args: (port, server) => ['--port', String(port), '--server', 'stream', '--stateless', '--', ...server],
  },
];

export interface RunningPeer {
  child: ChildProcess;
  pid: number;
  /** Its Streamable HTTP endpoint. */
  url: string;
  /** performance.now() at the spawn. */
  started: number;
  stop(): Promise<void>;
}

/** Spawns `peer` serving `server` (run in `cwd`); resolves at once, before it listens. */
export async function spawnPeer(peer: Peer, server: readonly string[], cwd: string): Promise<RunningPeer> {
  const port = await freePort();
  const started = performance.now();
  // stdin ignored: supergateway stops when a pipe on its stdin closes.
  const child = spawn(process.execPath, [peer.bin, ...peer.args(port, server)], {
    cwd,
    env: { PATH: process.env.PATH ?? '' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  return {
    child,
    pid: child.pid as number,
    url: `http://127.0.0.1:${port}/mcp`,
    started,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`${peer.name} ended:\n${output}`);
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(killer);
    },
  };
}

/**
 * What a client does first: the session handshake, then tools/call `echo`; resolves when the call is
 * answered. The handshake is retried every millisecond while nothing listens yet, and after a 503 (the
 * gateway's "try again", which a busy machine drew once from a gateway just started), as a client does.
 */
export async function firstCall(
  url: string,
  headers: Record<string, string>,
  callBody: string,
): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    let session: string | undefined;
    for (;;) {
      try {
        session = await initializeSession(url, agent, headers);
        break;
      } catch (error) {
        const refused = (error as NodeJS.ErrnoException).code === 'ECONNREFUSED';
        if (!refused && !(error instanceof HandshakeRefused && error.answer.status === 503)) throw error;
        await sleep(1);
      }
    }
    const answer = await postJson(
      url,
      agent,
      { ...headers, ...(session === undefined ? {} : { 'mcp-session-id': session }) },
      JSON.parse(callBody) as object,
    );
    if (answer.status !== 200 || !answer.text.includes('bench') || answer.text.includes('"isError":true'))
      throw new Error(`first call (${answer.status}): ${answer.text.slice(0, 500)}`);
  } finally {
    agent.destroy();
  }
}
