import type { Address, Hex } from 'viem';
import { viemUtils } from '../../../core/chain/viem.ts';
import { type CanvasApprovalV2, SigilError } from '@sigil/plugin-api';
import { canonicalJson, sha256Hex } from '../../../core/crypto.ts';

/** What an approval shows its owner: the value to approve, its hash, and the message a signature covers. */
export interface ApprovalRequest {
  value: unknown;
  valueHash: string;
  /** Sign this (EIP-191 personal_sign) with the decision line appended to send a signed decision. */
  message: string;
}

/**
 * The message a signed decision covers: the run, the node and the hash of the value shown, so a
 * signature approves exactly that value in that run and cannot be replayed on another.
 */
export const approvalMessage = (
  runId: string,
  nodeId: string,
  valueHash: string,
  approved: boolean,
): string =>
  [
    'Sigil canvas approval',
    `Run: ${runId}`,
    `Node: ${nodeId}`,
    `Value SHA-256: ${valueHash}`,
    `Decision: ${approved ? 'approve' : 'reject'}`,
  ].join('\n');

export function approvalRequest(runId: string, nodeId: string, value: unknown): ApprovalRequest {
  const valueHash = sha256Hex(canonicalJson(value ?? null));
  return {
    value: value ?? null,
    valueHash,
    message: approvalMessage(runId, nodeId, valueHash, true),
  };
}

export interface DecisionInput {
  approved: boolean;
  comment?: string | undefined;
  signature?: Hex | undefined;
  /** The hash the client saw; a decision on another value (the request changed since) is refused. */
  valueHash?: string | undefined;
}

/**
 * The owner's decision, checked: on the value shown (when the client names its hash), and signed by
 * the owner when a signature is given or required. Refusals are 4xx and change nothing.
 */
export async function checkedDecision(
  owner: Address,
  runId: string,
  nodeId: string,
  value: unknown,
  input: DecisionInput,
  options: { requireSignature: boolean; now: Date },
): Promise<CanvasApprovalV2> {
  const { valueHash } = approvalRequest(runId, nodeId, value);
  if (input.valueHash !== undefined && input.valueHash !== valueHash)
    throw new SigilError('conflict', 'The decision names another value than the one waiting for approval', {
      details: { reason: 'approval_value_mismatch', valueHash },
    });
  if (input.signature === undefined && options.requireSignature)
    throw new SigilError('invalid_request', 'This runtime takes signed approvals only', {
      hint: 'Sign the approval.required event\'s message (with "Decision: reject" to reject) and send it as signature',
      details: { reason: 'approval_signature_required' },
    });
  if (input.signature !== undefined) {
    const message = approvalMessage(runId, nodeId, valueHash, input.approved);
    const { verifyMessage } = await viemUtils();
    const valid = await verifyMessage({ address: owner, message, signature: input.signature }).catch(
      () => false,
    );
    if (!valid)
      throw new SigilError('forbidden', "The signature is not the run owner's over this decision", {
        details: { reason: 'approval_signature_invalid' },
      });
  }
  return {
    nodeId,
    approved: input.approved,
    decidedBy: owner,
    decidedAt: options.now.toISOString(),
    valueHash,
    ...(input.comment ? { comment: input.comment } : {}),
    ...(input.signature ? { signature: input.signature } : {}),
  };
}
