import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { startTinyServer, type TinyServer } from './support.ts';

/** What a proxy in front of a real runtime breaks, each the way a faulty runtime would. */
export interface CanvasFaults {
  /** Strips `id:` lines from event streams: events a client cannot resume by. */
  dropsEventIds?: boolean;
  /** Forgets `Last-Event-ID`: a resumed stream starts again from the first event. */
  ignoresLastEventId?: boolean;
  /** Sends the diamond's `tail running` event right after `run.started`: a node started before its inputs. */
  startsTailEarly?: boolean;
  /** Runs the chain without its closing edge when given the cycle: a runtime that does not look for cycles. */
  runsCycles?: boolean;
  /** Answers a run of the unguarded write with an empty event stream: a runtime that takes it. */
  takesUnguardedWrites?: boolean;
  /** Drops the signature of decisions: a runtime that never checks whose key signed. */
  ignoresSignatures?: boolean;
  /** Answers another wallet's decision 200 without passing it on: the run stays waiting. */
  acceptsStrangerDecisions?: boolean;
  /** Shows a run to anyone: run reads go upstream with the token of the last wallet that ran something. */
  sharesRuns?: boolean;
}

/**
 * A proxy in front of a real Sigil runtime that breaks one canvas rule at a time, so each check is seen
 * to fail for the reason it should, on an otherwise real deployment. `cycleDocument` is the document a
 * runtime that ignores cycles would run instead of the cycle.
 */
export function startCanvasProxy(
  upstream: string,
  faults: CanvasFaults,
  cycleDocument: unknown,
): Promise<TinyServer> {
  let lastRunner: string | undefined;
  return startTinyServer((request, response) => {
    let raw = '';
    request.on('data', (chunk: Buffer) => (raw += chunk.toString()));
    request.on('end', () => {
      void (async () => {
        const path = new URL(request.url ?? '/', 'http://proxy').pathname;
        const headers = forwardedHeaders(request);
        let body = raw;
        if (path === '/canvas/workflows/execute/stream') {
          const parsed = JSON.parse(raw) as { workflow?: { name?: string } };
          lastRunner = headers.authorization;
          if (faults.takesUnguardedWrites && parsed.workflow?.name === 'unguarded write') {
            response.writeHead(200, { 'content-type': 'text/event-stream' });
            return response.end();
          }
          if (faults.runsCycles && parsed.workflow?.name === 'conformance cycle')
            body = JSON.stringify({ ...parsed, workflow: cycleDocument });
        }
        if (path.endsWith('/decision')) {
          if (faults.acceptsStrangerDecisions && headers.authorization !== lastRunner)
            return sendBody(response, 200, '{"approved":true}');
          if (faults.ignoresSignatures)
            body = JSON.stringify({ ...(JSON.parse(raw) as object), signature: undefined });
        }
        if (faults.sharesRuns && path.startsWith('/canvas/runs/') && lastRunner)
          headers.authorization = lastRunner;
        if (faults.ignoresLastEventId) delete headers['last-event-id'];
        const answer = await fetch(new URL(request.url ?? '/', upstream), {
          method: request.method ?? 'GET',
          headers,
          ...(body === '' ? {} : { body }),
        });
        const type = answer.headers.get('content-type') ?? '';
        response.writeHead(answer.status, { 'content-type': type });
        if (!type.startsWith('text/event-stream') || !answer.body) return response.end(await answer.text());
        if (faults.startsTailEarly) return response.end(tailFirst(await answer.text()));
        const stream = Readable.fromWeb(answer.body as never);
        if (!faults.dropsEventIds) return stream.pipe(response);
        stream.on('data', (chunk: Buffer) => response.write(chunk.toString().replace(/^id: .*\n/gm, '')));
        stream.on('end', () => response.end());
      })();
    });
  });
}

function forwardedHeaders(request: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const name of ['authorization', 'content-type', 'accept', 'last-event-id']) {
    const value = request.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  return headers;
}

function sendBody(response: ServerResponse, status: number, body: string): void {
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(body);
}

/** The stream with the tail's `running` event moved right after the first event. */
function tailFirst(text: string): string {
  const blocks = text.split('\n\n');
  const at = blocks.findIndex((block) => block.includes('"nodeId":"tail","state":"running"'));
  if (at < 1) return text;
  const [tail] = blocks.splice(at, 1);
  blocks.splice(1, 0, tail as string);
  return blocks.join('\n\n');
}
