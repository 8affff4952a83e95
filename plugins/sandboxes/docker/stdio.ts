import { execFile } from 'node:child_process';
import { chmod, chown } from 'node:fs/promises';
import { closeSync, constants, openSync } from 'node:fs';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { type Duplex, Writable } from 'node:stream';
import { promisify } from 'node:util';
import type { Engine } from './engine.ts';

/**
 * How a container's stdin, stdout and stderr reach the runtime. Two ways:
 *
 * - `fifo`, for a local engine and an image with `/bin/sh`: three named pipes made in a directory
 *   bound into the container, onto which its shell redirects the server's stdio before it execs it.
 *   Messages then go from this process to the server through one kernel pipe each way, as with a
 *   plain child process; through the engine's attach they would also pass dockerd and the container's
 *   shim, which costs a warm call about half a millisecond more (README.md).
 * - `attach`, for everything else (a remote engine, an image without a shell): the engine's attach
 *   connection, hijacked, carrying stdin one way and the multiplexed stdout/stderr the other.
 *
 * Either way the server's stdin ends when this process closes it or dies (no writer is left on the
 * pipe; or the engine closes it with the attach, StdinOnce), and its output is read until it ends.
 */
export interface ContainerStdio {
  /** Where the caller's stdin goes. */
  readonly input: NodeJS.WritableStream;
  /** Hands every chunk of stdout and stderr to the sinks. */
  wire(stdout: (chunk: Buffer) => void, stderr: (chunk: Buffer) => void): void;
  /** Settles once the output has ended (after `exited()` for pipes). */
  readonly outputEnded: Promise<void>;
  /** The container has exited: its output ends once what it wrote is read. */
  exited(): void;
  /** Drops everything at once. */
  destroy(): void;
}

export function attachStdio(engine: Engine, attached: Duplex): ContainerStdio {
  attached.on('error', () => undefined); // the engine's wait says how the container ended
  const outputEnded = new Promise<void>((resolve) => {
    attached.once('close', () => resolve());
    attached.once('end', () => resolve());
  });
  return {
    input: attached,
    wire: (stdout, stderr) => engine.streams.modem.demuxStream(attached, sink(stdout), sink(stderr)),
    outputEnded,
    exited: () => undefined,
    destroy: () => attached.destroy(),
  };
}

/** demuxStream writes each frame's payload to a stream: this one passes it on. */
const sink = (deliver: (chunk: Buffer) => void) =>
  ({
    write: (chunk: Buffer) => {
      deliver(chunk);
      return true;
    },
  }) as unknown as NodeJS.WritableStream;

const execFileAsync = promisify(execFile);

/** The shell redirect onto the pipes in `dir` (bound at its own path: the mount table shows no other). */
export function fifoRedirect(dir: string): string {
  const pipe = (name: string) => `'${join(dir, name).replace(/'/g, `'\\''`)}'`;
  return `exec <${pipe('in')} >${pipe('out')} 2>${pipe('err')} && printf 1 >${pipe('opened')}`;
}

/**
 * Makes the pipes in `dir` (an empty directory of this sandbox's own, bound at its own path) for
 * the container's user and opens this side of them. Each output pipe is read here, with a spare write
 * end held open until the container has exited: without one, a read before the container has opened
 * its end would see the end of the output. The input is closed only once the container's shell has
 * opened its end (it says so on `opened`) or the container has exited: a pipe whose last writer is
 * gone before its reader opens it has lost what was written, and leaves that reader waiting forever.
 */
export async function fifoStdio(dir: string, uid: number): Promise<ContainerStdio> {
  const paths = ['in', 'out', 'err', 'opened'].map((name) => join(dir, name));
  // coreutils' mkfifo: node has no mkfifo(3).
  await execFileAsync('mkfifo', ['-m', '600', ...paths]);
  for (const path of paths) {
    // As root the pipes are the container user's alone; otherwise (a member of the docker group)
    // anyone's, behind the sandbox's own directory.
    await chown(path, uid, uid).catch(() => chmod(path, 0o666));
  }
  const [inPath, outPath, errPath, openedPath] = paths as [string, string, string, string];
  // Read-write: opening a pipe's write end alone would fail until the container opened its read end.
  const pipeIn = new Socket({
    fd: openSync(inPath, constants.O_RDWR | constants.O_NONBLOCK),
    readable: false,
    writable: true,
  });
  // The read ends first: a write end opened without blocking needs a reader.
  const [stdoutPipe, stderrPipe, openedPipe] = [outPath, errPath, openedPath].map(
    (path) =>
      new Socket({
        fd: openSync(path, constants.O_RDONLY | constants.O_NONBLOCK),
        readable: true,
        writable: false,
      }),
  ) as [Socket, Socket, Socket];
  const outputs = [stdoutPipe, stderrPipe] as const;
  const spare = paths.slice(1).map((path) => openSync(path, constants.O_WRONLY | constants.O_NONBLOCK));
  let spareOpen = true;
  let containerGone: () => void = () => undefined;
  const gone = new Promise<void>((resolve) => (containerGone = resolve));
  const opened = new Promise<void>((resolve) => openedPipe.once('data', () => resolve()));
  const closeSpare = () => {
    containerGone();
    if (!spareOpen) return;
    spareOpen = false;
    for (const fd of spare) closeSync(fd);
    openedPipe.destroy();
  };
  const input = new Writable({
    write: (chunk: Buffer, _encoding, done) => pipeIn.write(chunk, done),
    final: (done) => {
      void Promise.race([opened, gone]).then(() => pipeIn.end(done));
    },
  });
  for (const socket of [pipeIn, ...outputs, openedPipe]) socket.on('error', () => undefined);
  input.on('error', () => undefined);
  const outputEnded = Promise.all(
    outputs.map((socket) => new Promise<void>((resolve) => socket.once('close', () => resolve()))),
  ).then(() => undefined);
  return {
    input,
    wire: (stdout, stderr) => {
      outputs[0].on('data', stdout);
      outputs[1].on('data', stderr);
    },
    outputEnded,
    exited: closeSpare,
    destroy: () => {
      closeSpare();
      for (const stream of [input, pipeIn, ...outputs]) stream.destroy();
    },
  };
}
