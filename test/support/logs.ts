import { Writable } from 'node:stream';

/** Log lines a kernel writes (its real logger, secret scrubbing included), kept to prove what never reaches them. */
export function captureLogs(): { stream: Writable; text: () => string } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return { stream, text: () => lines.join('') };
}
