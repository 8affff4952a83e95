import { Writable } from 'node:stream';
import { pino } from 'pino';
import type { Logger } from '../../core/log.ts';

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

/** A logger whose lines (parsed) are kept, for asserting on a plugin's visible progress. */
export function recordingLogger(): { logger: Logger; lines: { msg: string; [key: string]: unknown }[] } {
  const lines: { msg: string }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'info' }, sink), lines };
}
