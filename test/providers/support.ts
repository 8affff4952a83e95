import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LlmStreamPart } from '@sigil/plugin-api';

/** A bare HTTP server for the odd upstream behaviours the stand-in does not have; it records requests. */
export interface RawUpstream {
  url: string;
  requests: { path: string; headers: IncomingHttpHeaders; body: Record<string, unknown> }[];
  close(): Promise<void>;
}

export async function rawUpstream(
  answer: (res: ServerResponse, body: Record<string, unknown>) => void,
): Promise<RawUpstream> {
  const requests: RawUpstream['requests'] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as Record<string, unknown>;
      requests.push({ path: req.url ?? '', headers: req.headers, body });
      answer(res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Writes SSE frames (`data:` lines, or `event:` + `data:` when given a pair) and ends. */
export function sse(res: ServerResponse, frames: readonly (unknown | [string, unknown])[]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const frame of frames) {
    if (Array.isArray(frame) && frame.length === 2 && typeof frame[0] === 'string')
      res.write(`event: ${frame[0]}\ndata: ${JSON.stringify(frame[1])}\n\n`);
    else res.write(`data: ${typeof frame === 'string' ? frame : JSON.stringify(frame)}\n\n`);
  }
  res.end();
}

/** Every part of a turn, and the error that ended it if any. */
export async function drain(
  stream: AsyncIterable<LlmStreamPart>,
): Promise<{ parts: LlmStreamPart[]; error?: unknown }> {
  const parts: LlmStreamPart[] = [];
  try {
    for await (const part of stream) parts.push(part);
  } catch (error) {
    return { parts, error };
  }
  return { parts };
}
