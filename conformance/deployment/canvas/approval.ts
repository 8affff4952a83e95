import { ensure, pass } from '@sigil/plugin-api/kit';
import { quote } from '../agents.ts';
import type { DeploymentContext } from '../context.ts';
import {
  approvalRequired,
  canvasRequest,
  canvasUser,
  cancelLeftover,
  endStatus,
  eventsOf,
  execute,
  nodeStatuses,
  otherWallet,
  resume,
  runIdOf,
  runOf,
} from './client.ts';
import { GATE, GUARDED_WRITE, UNGUARDED_WRITE } from './workflows.ts';

const KINDS = ['transform', 'approval', 'write-files'];

/**
 * A write node needs an approval upstream: refused at validation without one; with one, only the
 * owner's decision, signed by the owner when signed, lets it run. The run waiting is cancelled
 * whatever the check found, so no run of the check stays waiting.
 */
export async function approvalEnforcedCheck(context: DeploymentContext) {
  const owner = await canvasUser(context, KINDS);
  const guarded = await canvasRequest(context, owner, 'POST', '/canvas/workflows/validate', {
    workflow: GUARDED_WRITE,
  });
  ensure(
    guarded.status === 200,
    `the control, source → approval → write, is not valid: POST /canvas/workflows/validate answered ${guarded.status}: ${quote(guarded)}`,
  );
  const unguarded = await canvasRequest(context, owner, 'POST', '/canvas/workflows/execute/stream', {
    workflow: UNGUARDED_WRITE,
    agentId: owner.agentId,
  });
  ensure(
    unguarded.status === 400,
    `a write node with no approval upstream (source → write) run: expected HTTP 400, got ${unguarded.status}: ${quote(unguarded)}`,
  );

  const waiting = eventsOf(
    await execute(context, owner, GUARDED_WRITE, (event) => event.event === 'approval.required'),
    'the guarded run',
  );
  const runId = runIdOf(waiting, 'the guarded run');
  try {
    const request = approvalRequired(waiting, GATE, 'the guarded run');
    const decisionPath = `/canvas/runs/${runId}/nodes/${GATE}/decision`;
    const other = await otherWallet(context);
    const otherRuns = await canvasRequest(context, other, 'GET', '/canvas/runs');
    ensure(
      otherRuns.status === 200,
      `the other wallet's GET /canvas/runs: expected HTTP 200, got ${otherRuns.status}`,
    );
    const stranger = await canvasRequest(context, other, 'POST', decisionPath, { approved: true });
    ensure(
      stranger.status === 404,
      `another wallet's approval: expected HTTP 404, got ${stranger.status}: ${quote(stranger)}`,
    );
    const forged = await other.wallet.signMessage({ message: request.message });
    const forgery = await canvasRequest(context, owner, 'POST', decisionPath, {
      approved: true,
      valueHash: request.valueHash,
      signature: forged,
    });
    ensure(
      forgery.status === 403,
      `the owner sending an approval signed by another key: expected HTTP 403, got ${forgery.status}: ${quote(forgery)}`,
    );
    const run = await runOf(context, owner, runId);
    const write = run.nodes.find((node) => node.id === 'write')?.state;
    ensure(
      run.status === 'waiting_approval' && write !== 'running' && write !== 'succeeded',
      `after the refused decisions the run is ${run.status} and the write node ${write}; expected the run waiting_approval and the write not run`,
    );

    const signature = await owner.wallet.signMessage({ message: request.message });
    const approved = await canvasRequest(context, owner, 'POST', decisionPath, {
      approved: true,
      valueHash: request.valueHash,
      signature,
    });
    ensure(
      approved.status === 200,
      `the owner's signed approval: expected HTTP 200, got ${approved.status}: ${quote(approved)}`,
    );
    const lastSeen = waiting.at(-1)?.id ?? '0';
    const rest = eventsOf(await resume(context, owner, runId, lastSeen), 'the run after the approval');
    const wrote = nodeStatuses(rest).some(
      (status) => status.nodeId === 'write' && status.state === 'succeeded',
    );
    const status = endStatus(rest, 'the run after the approval');
    ensure(
      wrote && status === 'succeeded',
      `after the owner's approval the write node ${wrote ? 'succeeded' : 'did not succeed'} and the run ended ${status}`,
    );
    context.evidence.note(
      "refused: the unguarded write (400), another wallet's decision (404), a forged signature (403), the run still waiting; the owner's approval let the write run",
    );
    return pass();
  } finally {
    await cancelLeftover(context, owner, runId);
  }
}
