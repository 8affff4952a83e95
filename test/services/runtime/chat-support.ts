import { PROVIDER_VAULT_MESSAGE } from '../../../services/runtime/vault/index.ts';
import type { LocalAccount, PrivateKeyAccount } from 'viem/accounts';

export interface SseEvent {
  event: string;
  data: Record<string, unknown>;
  /** Its SSE id, when it has one (a chat answer's event number). */
  id?: string;
}

/** Parses a whole text/event-stream body into its events (comments, e.g. heartbeats, skipped). */
export function parseSse(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.split('\n\n')) {
    let event = 'message';
    let id: string | undefined;
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
      else if (line.startsWith('id: ')) id = line.slice(4);
    }
    if (data.length)
      events.push({
        event,
        data: JSON.parse(data.join('\n')) as Record<string, unknown>,
        ...(id === undefined ? {} : { id }),
      });
  }
  return events;
}

/** Reads an SSE response until `until` returns true for an event (then aborts it), or to its end. */
export async function readSse(
  res: Response,
  until?: (event: SseEvent) => boolean,
  abort?: AbortController,
): Promise<SseEvent[]> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  const events: SseEvent[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    const end = buffer.lastIndexOf('\n\n');
    if (end < 0) continue;
    const complete = parseSse(buffer.slice(0, end + 2));
    buffer = buffer.slice(end + 2);
    events.push(...complete);
    if (until && complete.some(until)) {
      abort?.abort();
      await reader.cancel().catch(() => undefined);
      break;
    }
  }
  return events;
}

/** Signs `wallet` in to the runtime with SIWE: its session JWT. */
export async function signIn(base: string, wallet: LocalAccount): Promise<string> {
  const { message } = (await (await fetch(`${base}/auth/challenge?address=${wallet.address}`)).json()) as {
    message: string;
  };
  const verified = await fetch(`${base}/auth/verify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message, signature: await wallet.signMessage({ message }) }),
  });
  if (!verified.ok) throw new Error(`sign-in failed: ${verified.status} ${await verified.text()}`);
  return ((await verified.json()) as { token: string }).token;
}

/** A client of the runtime's HTTP routes for one signed-in wallet. */
export function runtimeClient(base: string, jwt: string) {
  const send = (
    method: string,
    path: string,
    body?: unknown,
    signal?: AbortSignal,
    headers: Record<string, string> = {},
  ) =>
    fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${jwt}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      ...(signal ? { signal } : {}),
    });
  const json = async (method: string, path: string, body?: unknown) => {
    const res = await send(method, path, body);
    const text = await res.text();
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies, checked field by field
    return { status: res.status, body: (text === '' ? {} : JSON.parse(text)) as Record<string, any> };
  };
  return { send, json };
}

/** Stores `apiKey` in the slot and unlocks the vault, with the one provider-vault signature. */
export async function storeAndUnlock(
  client: ReturnType<typeof runtimeClient>,
  wallet: PrivateKeyAccount,
  slot: string,
  apiKey: string,
): Promise<void> {
  const signature = await wallet.signMessage({ message: PROVIDER_VAULT_MESSAGE });
  const stored = await client.json('PUT', `/wallet/provider-vault/keys/${slot}`, { apiKey, signature });
  if (stored.status >= 300) throw new Error(`store failed: ${stored.status} ${JSON.stringify(stored.body)}`);
  const unlocked = await client.json('POST', '/wallet/provider-vault/unlock', { signature });
  if (unlocked.status !== 200)
    throw new Error(`unlock failed: ${unlocked.status} ${JSON.stringify(unlocked.body)}`);
}
