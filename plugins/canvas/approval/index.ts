import { z } from 'zod';
import {
  type CanvasNodeContextV2,
  type CanvasNodeV2,
  type CanvasPortsV2,
  definePlugin,
  extensionPoints,
  provide,
  SigilError,
} from '@sigil/plugin-api';

const params = z
  .object({
    message: z
      .string()
      .min(1)
      .max(2000)
      .optional()
      .describe('What the owner is asked to approve, shown with the value in the approval request'),
  })
  .strict();

type ApprovalParams = z.infer<typeof params>;

const PORTS: CanvasPortsV2 = {
  inputs: {
    value: { type: 'json', required: false, description: 'The value the owner approves, shown to them' },
  },
  outputs: {
    value: {
      type: 'json',
      required: false,
      description: 'The approved value, passed through (absent when no edge feeds the input)',
    },
    decision: {
      type: 'object',
      description: 'The decision: approved, decidedBy (the wallet), decidedAt (ISO 8601) and any comment',
    },
  },
};

/**
 * The human gate of a workflow: the executor pauses the run before this node until the workflow's
 * owner decides, then runs it with that decision as `approvals[0]`. An approval lets the value through
 * and lets the nodes downstream (a `writes` node) run; a rejection fails this node, so its branch.
 */
function approvalNode(): CanvasNodeV2<ApprovalParams> {
  return {
    specVersion: 'v2',
    nodeKind: 'approval',
    description: "Pauses the run until the workflow's owner approves or rejects the value it is given",
    effect: 'approval',
    params,
    ports: () => PORTS,
    example: { params: { message: 'Publish this page?' }, inputs: { value: { title: 'Hello' } } },
    run: async (context: CanvasNodeContextV2<ApprovalParams>) => {
      context.signal.throwIfAborted();
      const decision = context.approvals[0];
      // Only the node's own decision counts: one of another node would approve what nobody was shown.
      if (decision === undefined || decision.nodeId !== context.nodeId)
        throw new SigilError(
          'forbidden',
          `Approval node ${context.nodeId} runs only once its owner decided`,
          {
            details: { reason: 'approval_required', nodeId: context.nodeId },
          },
        );
      if (!decision.approved)
        throw new SigilError('forbidden', `The owner rejected approval node ${context.nodeId}`, {
          hint: decision.comment,
          details: { reason: 'approval_rejected', nodeId: context.nodeId, decidedBy: decision.decidedBy },
        });
      context.log('approved', { decidedBy: decision.decidedBy, decidedAt: decision.decidedAt });
      return {
        ...(context.inputs.value === undefined ? {} : { value: context.inputs.value }),
        decision: {
          approved: true,
          decidedBy: decision.decidedBy,
          decidedAt: decision.decidedAt,
          ...(decision.comment === undefined ? {} : { comment: decision.comment }),
        },
      };
    },
  };
}

export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-approval',
  specVersion: 'v2',
  description: "Canvas node `approval`: a human gate, the workflow's owner approves or rejects",
  config: z.object({}).strict(),
  provides: [provide(extensionPoints.canvasNodeKinds, 'approval')],
  create: () => approvalNode(),
});
