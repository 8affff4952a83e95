import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { pino } from 'pino';
import { startAnvil } from '../../devchain/index.ts';
import { startDevChain } from '../support/chain.ts';

const HOLDER = fileURLToPath(new URL('./fixtures/hold-dev-chain.ts', import.meta.url));
const silent = pino({ level: 'silent' });

/** Alive means running: a zombie (dead, not yet reaped by whoever inherited it) counts as gone. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function eventually(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (condition()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return condition();
}

async function answers(rpcUrl: string): Promise<boolean> {
  try {
    const response = await fetch(rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
      signal: AbortSignal.timeout(1_000),
    });
    return response.ok;
  } catch {
    return false;
  }
}

/** Local addresses of listening TCP sockets on `port` ("0100007F" is 127.0.0.1). */
function listeningAddresses(port: number): string[] {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  return ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((file) => {
    try {
      return readFileSync(file, 'utf8')
        .split('\n')
        .slice(1)
        .map((line) => line.trim().split(/\s+/))
        .filter((fields) => fields[1]?.endsWith(`:${hexPort}`) && fields[3] === '0A') // 0A: LISTEN
        .map((fields) => fields[1]!.split(':')[0]!);
    } catch {
      return [];
    }
  });
}

describe('dev chain process', function () {
  this.timeout(60_000);

  it('starts fast on a kernel-picked loopback port, and stop() ends anvil (idempotently)', async () => {
    const started = Date.now();
    const chain = await startDevChain();
    const elapsed = Date.now() - started;
    try {
      expect(elapsed, 'start-up in ms').to.be.below(5_000);
      const port = Number(new URL(chain.rpcUrl).port);
      expect(new URL(chain.rpcUrl).hostname).to.equal('127.0.0.1');
      expect(listeningAddresses(port)).to.deep.equal(['0100007F']);
      expect(alive(chain.anvilPid)).to.equal(true);
      expect(readFileSync(`/proc/${chain.anvilPid}/comm`, 'utf8').trim()).to.equal('anvil');
    } finally {
      await chain.stop();
    }
    expect(alive(chain.anvilPid)).to.equal(false);
    expect(await answers(chain.rpcUrl)).to.equal(false);
    await chain.stop();
  });

  it('listens on a configured port, and a second chain on that port fails with anvil’s reason', async () => {
    const first = await startAnvil({ logger: silent });
    const port = first.port;
    await first.stop();
    const chain = await startDevChain({ port });
    try {
      expect(chain.rpcUrl).to.equal(`http://127.0.0.1:${port}`);
      let failure: unknown;
      await startDevChain({ port }).then(
        (unexpected) => unexpected.stop(),
        (error: unknown) => {
          failure = error;
        },
      );
      expect(String(failure)).to.match(/anvil .*exit/);
      expect(String(failure)).to.match(/address already in use|Address in use|os error 98/i);
      expect(await answers(chain.rpcUrl)).to.equal(true);
    } finally {
      await chain.stop();
    }
  });

  it('fails with a clear error when the anvil binary cannot be started', async () => {
    let failure: unknown;
    await startAnvil({ logger: silent, binaryPath: '/nonexistent/anvil' }).then(
      (unexpected) => unexpected.stop(),
      (error: unknown) => {
        failure = error;
      },
    );
    expect(String(failure)).to.match(/^Error: anvil /);
    expect(String(failure)).to.include('/nonexistent/anvil');
  });

  it('dies with its parent process when that is SIGKILLed (no orphan anvil)', async () => {
    const holder = spawn(process.execPath, ['--import', 'tsx', HOLDER], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let anvilPid: number | undefined;
    try {
      const firstLine = await new Promise<string>((resolve, reject) => {
        createInterface({ input: holder.stdout }).once('line', resolve);
        holder.once('exit', (code) =>
          reject(new Error(`the holder exited (${code}) before starting the chain`)),
        );
      });
      const started = JSON.parse(firstLine) as { anvilPid: number; rpcUrl: string };
      anvilPid = started.anvilPid;
      expect(alive(started.anvilPid)).to.equal(true);
      expect(await answers(started.rpcUrl)).to.equal(true);

      holder.kill('SIGKILL');

      const gone = await eventually(() => !alive(started.anvilPid), 5_000);
      expect(gone, `anvil ${started.anvilPid} outlived its parent`).to.equal(true);
      expect(await answers(started.rpcUrl)).to.equal(false);
    } finally {
      holder.kill('SIGKILL');
      // Should the test fail, the orphan must not outlive it.
      if (anvilPid !== undefined && alive(anvilPid)) process.kill(anvilPid, 'SIGKILL');
    }
  });
});
