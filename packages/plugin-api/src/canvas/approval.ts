import type { CanvasApprovalV2 } from '../contracts/canvas-node-v2.ts';
import { SigilError } from '../errors.ts';

/** The rule for a `writes` node (canvas-node v2): at least one upstream decision, every one approved. */
export const approvedUpstream = (approvals: readonly CanvasApprovalV2[]): boolean =>
  approvals.length > 0 && approvals.every((decision) => decision.approved);

/**
 * What a `writes` node checks first: `approvedUpstream`, or else a `forbidden` rejection, reason
 * `approval_required`, before anything changes.
 */
export function requireApproval(approvals: readonly CanvasApprovalV2[]): void {
  if (approvedUpstream(approvals)) return;
  throw new SigilError('forbidden', 'This node changes things outside the run: it needs an approval first', {
    hint: 'Put an approval node upstream of it and approve the run',
    details: { reason: 'approval_required' },
  });
}
