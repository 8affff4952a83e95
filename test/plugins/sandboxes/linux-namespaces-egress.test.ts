import { readdirSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { expect } from 'chai';
import type { SandboxLimits } from '@sigil/plugin-api';
import {
  configSchema,
  type LinuxNamespacesRuntime,
} from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import { ProbeRuntimes } from './support.ts';

/**
 * The egress proxy runs in the runtime's own process, so every connection a sandbox makes through
 * its allow-list costs that process descriptors. These tests are the attack that pushed the gateway
 * to EMFILE (a sandbox opening hundreds of idle connections), then each limit that stops it: the
 * per-sandbox connection cap, the deadline on a request head, the idle timeout, RLIMIT_NOFILE.
 */

const openDescriptors = () => readdirSync('/proc/self/fd').length;

describe('sandbox-linux-namespaces: egress proxy limits', function () {
  this.timeout(60_000);
  let probes: ProbeRuntimes;
  let echo: Server;
  let target: string;

  before(async () => {
    probes = new ProbeRuntimes('egress');
    echo = createServer((socket) => socket.pipe(socket).on('error', () => undefined));
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    target = `127.0.0.1:${(echo.address() as { port: number }).port}`;
  });
  afterEach(() => probes.stop());
  after(() => {
    echo.close();
    probes.remove();
  });

  const newRuntime = (options: Record<string, unknown> = {}) => probes.runtime(options);

  /** Starts the probe with `target` (or `allow`) allowed; resolves with its first report line, parsed. */
  async function start<T>(
    runtime: LinuxNamespacesRuntime,
    mode: string,
    args: string[],
    { limits, allow = [target] }: { limits?: SandboxLimits; allow?: string[] } = {},
  ): Promise<T> {
    return (await probes.probe<T>(runtime, mode, args, { allow, ...(limits ? { limits } : {}) })).report;
  }

  it("holds a sandbox's flood of connections to its cap (64 by default): this process's descriptors stay bounded", async () => {
    const runtime = await newRuntime();
    const before = openDescriptors();
    const report = await start<{ established: number; outcomes: Record<string, number> }>(
      runtime,
      'egressFlood',
      [target, '600'],
    );
    // While the probe holds what it got: the proxy's two ends and the echo server's end per tunnel.
    const grown = openDescriptors() - before;
    expect(report.established, JSON.stringify(report.outcomes)).to.equal(64);
    expect(report.outcomes['503'], 'refused with 503').to.be.at.least(1);
    expect(grown).to.be.at.most(64 * 3 + 32);
    // And this process still opens descriptors and the sandbox still reaches its allowed host.
    const again = await start<{ established: number }>(runtime, 'egressFlood', [target, '4']);
    expect(again.established).to.equal(4);
  });

  // A connection that holds the proxy without using it: silent before its request head, or idle after.
  for (const { what, timeout, hold, answer } of [
    {
      what: 'a connection that sends no request head within headerTimeoutMs (408)',
      timeout: 'headerTimeoutMs',
      hold: 'silent',
      answer: 'HTTP/1.1 408',
    },
    {
      what: 'a tunnel idle for idleTimeoutMs',
      timeout: 'idleTimeoutMs',
      hold: 'idle',
      answer: 'HTTP/1.1 200',
    },
  ]) {
    it(`closes ${what}`, async () => {
      const runtime = await newRuntime({ egress: { [timeout]: 300 } });
      const report = await start<{ closed: boolean; afterMs: number; answer: string }>(
        runtime,
        'egressHold',
        [hold, target, '20000'],
      );
      expect(report).to.include({ closed: true, answer });
    });
  }

  it('sets RLIMIT_NOFILE in the sandbox (1024 by default), not what the runtime has', async () => {
    const runtime = await newRuntime();
    const report = await start<{ soft: number; hard: number; opened: number; error: string }>(
      runtime,
      'openFiles',
      [],
    );
    expect(report).to.deep.include({ soft: 1024, hard: 1024, error: 'EMFILE' });
    expect(report.opened).to.be.below(1024);
  });

  describe('where an allowed name may lead', () => {
    interface NetReport {
      results: { target: string; proxy: { status: number | string; echo?: string } }[];
    }
    const viaLocalhost = () => `localhost:${target.split(':')[1]}`;

    it('refuses a name that resolves to loopback when no address or range is listed (403)', async () => {
      const runtime = await newRuntime();
      const name = viaLocalhost();
      const report = await start<NetReport>(runtime, 'net', [name], { allow: [name] });
      expect(report.results[0]?.proxy.status).to.equal(403);
    });

    it('reaches an address listed as itself, and a name whose address is in a listed range', async () => {
      const literal = await start<NetReport>(await newRuntime(), 'net', [target]);
      expect(literal.results[0]?.proxy).to.deep.equal({ status: 200, echo: 'ping' });
      // Only 127.0.0.0/8 is listed: localhost's ::1 is dropped, its 127.0.0.1 (where the echo server
      // listens) is the address the proxy connects to.
      const runtime = await newRuntime({ egress: { privateRanges: ['127.0.0.0/8'] } });
      const name = viaLocalhost();
      const report = await start<NetReport>(runtime, 'net', [name], { allow: [name] });
      expect(report.results[0]?.proxy).to.deep.equal({ status: 200, echo: 'ping' });
    });

    it('refuses a private range that is not an address or CIDR range in the config', () => {
      expect(() => configSchema.parse({ egress: { privateRanges: ['10.0.0.0/33'] } })).to.throw(/CIDR/);
    });
  });
});
