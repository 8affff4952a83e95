import { spawn } from 'node:child_process';
import { Writable } from 'node:stream';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { ProcessStdioTransport, type ProcessStdio } from '../../core/mcp/process-transport.ts';

/** A process that runs `script` with node, seen through the ProcessStdio shape a sandbox hands out. */
function started(script: string): ProcessStdio & { killed: () => boolean } {
  const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'pipe'] });
  let killed = false;
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  return {
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    kill: async () => {
      killed = true;
      child.kill('SIGKILL');
      await exited;
    },
    killed: () => killed,
  };
}

/** Echoes every line of stdin back, and first prints whatever `preamble` says. */
const echo = (preamble = '') =>
  `${preamble}; require('readline').createInterface({ input: process.stdin }).on('line', (l) => process.stdout.write(l + '\\n'));`;

const ping = (id: number): JSONRPCMessage => ({ jsonrpc: '2.0', id, method: 'ping' });

describe('ProcessStdioTransport', () => {
  it('sends newline-delimited JSON-RPC and delivers each line back as a message', async () => {
    const transport = new ProcessStdioTransport(started(echo()));
    const received: JSONRPCMessage[] = [];
    const two = new Promise<void>((resolve) => {
      transport.onmessage = (message) => {
        received.push(message);
        if (received.length === 2) resolve();
      };
    });
    await transport.start();
    await transport.send(ping(1));
    await transport.send(ping(2));
    await two;
    expect(received).to.deep.equal([ping(1), ping(2)]);
    await transport.close();
  });

  it('reports a malformed line and keeps reading the ones after it', async () => {
    const transport = new ProcessStdioTransport(started(echo("process.stdout.write('not json\\n')")));
    const errors: Error[] = [];
    transport.onerror = (error) => errors.push(error);
    const message = new Promise<JSONRPCMessage>((resolve) => (transport.onmessage = resolve));
    await transport.start();
    await transport.send(ping(7));
    expect(await message).to.deep.equal(ping(7));
    expect(errors).to.have.lengthOf(1);
    await transport.close();
  });

  it('reads messages split across writes, several in one write, and CRLF line ends', async () => {
    // One message in three pieces (a pause between them), then two in one write, the second with CRLF.
    const script = `
      const w = (s) => process.stdout.write(s);
      w('{"jsonrpc":"2.0",'); setTimeout(() => w('"id":1,"result":{"te'), 50);
      setTimeout(() => w('xt":"é"}}\\n{"jsonrpc":"2.0","id":2,"result":{}}\\n{"jsonrpc":"2.0","id":3,"result":{}}\\r\\n'), 100);
      setInterval(() => {}, 1000);`;
    const transport = new ProcessStdioTransport(started(script));
    const received: JSONRPCMessage[] = [];
    const three = new Promise<void>((resolve) => {
      transport.onmessage = (message) => {
        received.push(message);
        if (received.length === 3) resolve();
      };
    });
    await transport.start();
    await three;
    expect(received).to.deep.equal([
      { jsonrpc: '2.0', id: 1, result: { text: 'é' } },
      { jsonrpc: '2.0', id: 2, result: {} },
      { jsonrpc: '2.0', id: 3, result: {} },
    ]);
    await transport.close();
  });

  it('reports lines that are JSON but not JSON-RPC 2.0 messages, and skips them', async () => {
    const script = `process.stdout.write('[1,2]\\n{"jsonrpc":"1.0","id":1}\\n"text"\\n{"jsonrpc":"2.0","id":4,"result":{}}\\n'); setInterval(() => {}, 1000)`;
    const transport = new ProcessStdioTransport(started(script));
    const errors: Error[] = [];
    transport.onerror = (error) => errors.push(error);
    const message = new Promise<JSONRPCMessage>((resolve) => (transport.onmessage = resolve));
    await transport.start();
    expect(await message).to.deep.equal({ jsonrpc: '2.0', id: 4, result: {} });
    expect(errors.map((error) => error.message)).to.have.lengthOf(3);
    expect(errors[1]?.message).to.match(/"jsonrpc" must be "2.0"/);
    await transport.close();
  });

  it('refuses a message longer than maxMessageBytes: error, then the process is killed', async () => {
    const process = started("process.stdout.write('x'.repeat(100000)); setInterval(() => {}, 1000)");
    const transport = new ProcessStdioTransport(process, { maxMessageBytes: 10_000 });
    const error = new Promise<Error>((resolve) => (transport.onerror = resolve));
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve));
    await transport.start();
    expect((await error).message).to.match(/maximum size/);
    await closed;
    await process.exited;
    expect(process.killed()).to.equal(true);
  });

  it('closes when the process ends, and drains stderr to onStderr', async () => {
    let stderr = '';
    const child = started("process.stderr.write('diagnostics'); process.exit(0)");
    const transport = new ProcessStdioTransport(child, { onStderr: (chunk) => (stderr += chunk.toString()) });
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve));
    await transport.start();
    await closed;
    await child.exited; // stderr may still be in flight when stdout's end closes the transport
    expect(stderr).to.equal('diagnostics');
    const error = await transport.send(ping(1)).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(error?.message).to.match(/closed/);
  });

  it('refuses to send on a stdin already ended, before the transport saw the process end, without "write after end"', async () => {
    const child = started(echo());
    const transport = new ProcessStdioTransport(child);
    await transport.start();
    // As a sandbox's kill() does: stdin ends first, the process's end is reported later.
    child.stdin.end();
    const error = await transport.send(ping(1)).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(error?.message).to.equal('transport closed: the process has closed its stdin');
    await transport.close();
  });

  it('sends the messages of one event-loop turn, from separate callbacks, in one write', async () => {
    const process_ = started(echo());
    // The child's stdin, behind a stream that records how many messages each write to it carried.
    const writes: number[] = [];
    const stdin = new Writable({
      writev(chunks, callback) {
        writes.push(chunks.length);
        process_.stdin.write(Buffer.concat(chunks.map(({ chunk }) => chunk as Buffer)), callback);
      },
      write(chunk: Buffer, _encoding, callback) {
        writes.push(1);
        process_.stdin.write(chunk, callback);
      },
    });
    const transport = new ProcessStdioTransport({ ...process_, stdin });
    let received = 0;
    const all = new Promise<void>((resolve) => {
      transport.onmessage = () => {
        if (++received === 20) resolve();
      };
    });
    await transport.start();
    // Each send from a callback of its own, as the calls of separate HTTP requests are.
    const sent = Array.from(
      { length: 20 },
      (_, id) => new Promise<void>((resolve) => setImmediate(() => resolve(transport.send(ping(id))))),
    );
    await Promise.all(sent);
    await all;
    expect(writes).to.deep.equal([20]);
    await transport.close();
  });

  it('holds many senders on a full pipe with one drain listener, and lets them all go when it drains', async () => {
    // Reads nothing for 300 ms, so the pipe fills, then echoes everything.
    const process_ = started(`setTimeout(() => { ${echo()} }, 300);`);
    const transport = new ProcessStdioTransport(process_);
    let received = 0;
    const calls = 200;
    const all = new Promise<void>((resolve) => {
      transport.onmessage = () => {
        if (++received === calls) resolve();
      };
    });
    await transport.start();
    const big = 'x'.repeat(16 * 1024);
    const sent = Array.from({ length: calls }, (_, id) =>
      transport.send({ jsonrpc: '2.0', id, method: 'ping', params: { padding: big } }),
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(process_.stdin.listenerCount('drain')).to.be.at.most(1);
    await Promise.all(sent);
    await all;
    expect(received).to.equal(calls);
    await transport.close();
  });
});
