import { excerpt, failWith } from '@sigil/plugin-api/kit';

/** One Server-Sent Event whose data is JSON, as Sigil's streams send them. */
export interface SseEvent {
  /** The event's `id:` field, by which a client resumes (`Last-Event-ID`); undefined when it has none. */
  id: string | undefined;
  event: string;
  data: unknown;
}

/**
 * The events of an SSE body, in order. Comments (`: ping`) and blocks without data are skipped; a block
 * not yet ended by a blank line (a stream left midway) is not an event yet. Data that is not JSON fails
 * the check.
 */
export function parseSse(text: string): SseEvent[] {
  const blocks = text.split(/\r?\n\r?\n/);
  blocks.pop();
  const events: SseEvent[] = [];
  for (const block of blocks) {
    let event = 'message';
    let id: string | undefined;
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('id:')) id = line.slice(3).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (!data.length) continue;
    try {
      events.push({ id, event, data: JSON.parse(data.join('\n')) as unknown });
    } catch {
      failWith(`the ${event} event's data is not JSON: ${excerpt(data.join(' '), 120)}`);
    }
  }
  return events;
}
