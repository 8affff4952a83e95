import { randomBytes } from 'node:crypto';
import type { Writable } from 'node:stream';
import { expect } from 'chai';
import type { ManualClock } from '../../../core/clock.ts';
import { newWallet } from '../../core/auth/support.ts';
import { setOnChain } from './ledger/support.ts';
import type { TestDatabase } from '../../support/kernel.ts';
import { readSse, runtimeClient, type SseEvent } from './chat-support.ts';
import { internalKeyStack, type Stack } from './support.ts';

const USD = 1_000_000n;
const INTERNAL_KEY = 'sk-internal-operator-key-h1st';
export const IDLE_SECONDS = 600;

/** A runtime on `database` whose chats run on the operator's key, with `history` keys when given. */
export const start = (
  database: TestDatabase,
  options: { clock?: ManualClock; dataKeys?: { id: string; key: string }[]; logs?: Writable } = {},
): Promise<{ stack: Stack; close(): Promise<void> }> =>
  internalKeyStack(database, {
    operatorKey: INTERNAL_KEY,
    chat: { sessionIdleSeconds: IDLE_SECONDS, maxSessionsPerAgent: 3 },
    history: { dataKeys: options.dataKeys ?? [] },
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.logs ? { logs: options.logs } : {}),
  });

export type Client = ReturnType<typeof runtimeClient>;

/** A new funded wallet signed in to `stack`, with an agent on sigil-echo. */
export async function newUser(stack: Stack) {
  const wallet = newWallet();
  const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
  await setOnChain(stack.runtime.ledger.ledger, wallet.address, USD);
  const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body
    .id as string;
  return { wallet, client, agentId };
}

/** One message, answered to its end: its events, its usage (one model turn) and its cost. */
export async function say(client: Client, agentId: string, sessionId: string, content: string, id?: string) {
  const res = await client.send('POST', `/agents/${agentId}/sessions/${sessionId}/messages`, {
    content,
    ...(id ? { id } : {}),
  });
  expect(res.status, `POST message: ${res.status}`).to.equal(200);
  const events = await readSse(res);
  const of = (name: string) => events.find((e: SseEvent) => e.event === name)?.data;
  expect(of('error'), JSON.stringify(of('error'))).to.equal(undefined);
  expect(of('done')).to.be.an('object');
  return {
    events,
    usage: of('usage') as Record<string, unknown>,
    cost: of('cost') as Record<string, unknown>,
  };
}

export const session = (client: Client, agentId: string, body: Record<string, unknown> = {}) =>
  client.json('POST', `/agents/${agentId}/sessions`, body).then((res) => {
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    return res.body.id as string;
  });

/** A fresh 32-byte key in the config's form. */
export const newDataKey = (id: string) => ({ id, key: randomBytes(32).toString('base64') });
