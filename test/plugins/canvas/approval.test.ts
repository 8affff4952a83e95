import { expect } from 'chai';
import { type CanvasApprovalV2, type CanvasNodeV2, isSigilError } from '@sigil/plugin-api';
import { approvedDecision, canvasTestContext, describePluginKit, pluginLoader } from '@sigil/plugin-api/kit';
import * as approvalModule from '../../../plugins/canvas/approval/index.ts';

const OWNER = '0x00000000000000000000000000000000000000aa';

/** Runs the approval node `approve` with `approvals` and `inputs`; its outputs, or what it rejected with. */
async function runApproval(
  node: CanvasNodeV2,
  approvals: readonly CanvasApprovalV2[],
  inputs: Record<string, unknown> = {},
  signal?: AbortSignal,
): Promise<{ outputs?: Record<string, unknown>; error?: unknown }> {
  const { context, dispose } = await canvasTestContext({
    params: {},
    inputs,
    approvals,
    nodeId: 'approve',
    ...(signal ? { signal } : {}),
  });
  try {
    return { outputs: await node.run(context) };
  } catch (error) {
    return { error };
  } finally {
    await dispose();
  }
}

describe('canvas-approval', function () {
  this.timeout(60_000);

  describePluginKit(
    approvalModule,
    {},
    {
      // Not a writes node, and it is given no secret.
      expectNotApplicable: [
        'canvas-node.writes-need-approval',
        'canvas-node.writes-once',
        'canvas-node.no-secret',
      ],
    },
  );

  const load = pluginLoader(approvalModule.default);

  it('passes the approved value through, with the decision', async () => {
    const node = await load();
    const decision = { ...approvedDecision('approve', OWNER), comment: 'ship it' };
    const { outputs } = await runApproval(node, [decision], { value: { title: 'Hello' } });
    expect(outputs).to.deep.equal({
      value: { title: 'Hello' },
      decision: { approved: true, decidedBy: OWNER, decidedAt: decision.decidedAt, comment: 'ship it' },
    });
  });

  it('gives no value when no edge feeds one, the decision only', async () => {
    const node = await load();
    const decision = approvedDecision('approve', OWNER);
    const { outputs } = await runApproval(node, [decision]);
    expect(outputs).to.deep.equal({
      decision: { approved: true, decidedBy: OWNER, decidedAt: decision.decidedAt },
    });
    expect(node.ports({}).outputs.value?.required).to.equal(false);
  });

  it('rejects as forbidden (approval_rejected) when the owner rejected, with their comment as the hint', async () => {
    const node = await load();
    const rejected = { ...approvedDecision('approve', OWNER), approved: false, comment: 'not this title' };
    const { error } = await runApproval(node, [rejected], { value: 1 });
    expect(isSigilError(error)).to.equal(true);
    expect(error).to.include({ code: 'forbidden', hint: 'not this title' });
    expect((error as { details: unknown }).details).to.deep.include({ reason: 'approval_rejected' });
  });

  it('refuses to run without a decision, or with the decision of another node (approval_required)', async () => {
    const node = await load();
    for (const approvals of [[], [approvedDecision('another-approval', OWNER)]]) {
      const { error } = await runApproval(node, approvals, { value: 1 });
      expect(error).to.include({ code: 'forbidden' });
      expect((error as { details: unknown }).details).to.deep.include({ reason: 'approval_required' });
    }
  });

  it("rejects with the signal's reason once it aborted, though approved", async () => {
    const node = await load();
    const controller = new AbortController();
    const reason = new Error('cancelled');
    controller.abort(reason);
    const { error } = await runApproval(node, [approvedDecision('approve', OWNER)], {}, controller.signal);
    expect(error).to.equal(reason);
  });

  it('refuses params it does not know, and a message that is not one, with their path', async () => {
    const node = await load();
    for (const params of [{ prompt: 'Publish?' }, { message: '' }]) {
      const parsed = node.params.safeParse(params);
      expect(parsed.success).to.equal(false);
      expect(parsed.error?.issues.map((issue) => issue.path.join('.') || issue.message)[0]).to.match(
        /^(message|Unrecognized key: "prompt")$/,
      );
    }
  });
});
