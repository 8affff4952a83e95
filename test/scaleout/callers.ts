import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { signIn } from '../services/runtime/chat-support.ts';
import { eventually } from '../support/eventually.ts';
import type { ReplicaProcess, ReplicaSet } from '../support/replicas.ts';

/**
 * Callers of the balancer and the replica each is sent to: what the scale-out tests use to aim a
 * request at one replica (its affinity key) and to read from nginx's log who answered.
 */

/** A kind of caller: how a new one is made, and how one sends a request (with a request id). */
export interface CallerKind {
  make(set: ReplicaSet): Promise<string>;
  send(set: ReplicaSet, caller: string, requestId: string): Promise<Response>;
}

/** A gateway caller known by its X-MCP-Session (a fresh name), listing the servers. */
export const mcpSession: CallerKind = {
  make: async () => `caller-${randomUUID()}`,
  send: (set, session, requestId) =>
    fetch(`${set.gatewayUrl}/api/servers`, {
      headers: { 'x-mcp-session': session, 'x-request-id': requestId },
    }),
};

/** A runtime caller known by its session JWT (a fresh wallet signed in), reading its balance. */
export const runtimeSession: CallerKind = {
  make: (set) => signIn(set.runtimeUrl, privateKeyToAccount(generatePrivateKey())),
  send: (set, jwt, requestId) =>
    fetch(`${set.runtimeUrl}/wallet/balance`, {
      headers: { authorization: `Bearer ${jwt}`, 'x-request-id': requestId },
    }),
};

/**
 * Sends `times` requests for each caller (a request id each) and reads from the balancer's log which
 * replica answered them: the one replica of each caller (it fails when a caller's requests were split).
 */
export async function servedBy(
  set: ReplicaSet,
  callers: string[],
  times: number,
  kind: Pick<CallerKind, 'send'>,
): Promise<Map<string, string>> {
  const served = new Map<string, string>();
  for (const caller of callers) {
    const upstreams = new Set<string>();
    for (let i = 0; i < times; i++) {
      const requestId = randomUUID();
      const response = await kind.send(set, caller, requestId);
      expect(response.status, await response.text()).to.equal(200);
      for (const line of await set.balancer.requestsWithId(requestId)) upstreams.add(line.upstream);
    }
    expect(upstreams.size, `the requests of one caller went to ${[...upstreams].join(' and ')}`).to.equal(1);
    served.set(caller, [...upstreams][0]!);
  }
  return served;
}

/** A new caller of `kind` whose requests the balancer sends to `replica`. */
export function callerServedBy(
  set: ReplicaSet,
  replica: ReplicaProcess,
  kind: CallerKind,
  timeoutMs?: number,
): Promise<string> {
  return eventually(
    `a caller the balancer sends to ${replica.name}`,
    async () => {
      const caller = await kind.make(set);
      return (await servedBy(set, [caller], 1, kind)).get(caller) === replica.address ? caller : undefined;
    },
    timeoutMs,
  );
}
