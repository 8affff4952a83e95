import { isLlmProviderError, isSigilError, SigilError } from '@sigil/plugin-api';
import { PORT_VALUE_SCHEMAS } from '@sigil/plugin-api/canvas';
import type { RunError } from './runs.ts';
import type { PlannedNode } from './validate.ts';

/**
 * Checks a node's outputs against its ports (every required output set, each of its port's type,
 * nothing undeclared, no larger than `maxBytes`) and gives them as JSON text. A node that breaks its
 * ports fails.
 */
export function checkOutputs(node: PlannedNode, outputs: unknown, maxBytes: number): string {
  const fail = (message: string) =>
    new SigilError('internal', `Node ${node.spec.id} (${node.spec.kind}) ${message}`, {
      details: { reason: 'outputs_invalid', nodeId: node.spec.id },
    });
  if (typeof outputs !== 'object' || outputs === null || Array.isArray(outputs))
    throw fail('did not give an object of outputs');
  const given = outputs as Record<string, unknown>;
  for (const [port, declared] of Object.entries(node.ports.outputs)) {
    const value = given[port];
    if (value === undefined) {
      if (declared.required !== false) throw fail(`gave no value for its output ${port}`);
      continue;
    }
    const checked = PORT_VALUE_SCHEMAS[declared.type].safeParse(value);
    if (!checked.success) throw fail(`gave output ${port} that is not ${declared.type}`);
  }
  const extra = Object.keys(given).filter((port) => !(port in node.ports.outputs));
  if (extra.length > 0) throw fail(`gave undeclared outputs: ${extra.join(', ')}`);
  const json = JSON.stringify(given);
  const bytes = Buffer.byteLength(json);
  if (bytes > maxBytes) throw fail(`gave ${bytes} bytes of outputs; at most ${maxBytes}`);
  return json;
}

/** What a node's failure shows the run's owner: a SigilError's code and safe details, else a generic line. */
export function runErrorOf(err: unknown): RunError {
  if (isSigilError(err))
    return {
      code: err.code,
      message: err.message,
      ...(typeof err.details?.reason === 'string' ? { reason: err.details.reason } : {}),
      ...(err.hint ? { hint: err.hint } : {}),
      ...(err.details ? { details: err.details } : {}),
    };
  if (isLlmProviderError(err))
    return { code: 'unavailable', reason: `provider_${err.kind}`, message: err.message };
  return {
    code: 'internal',
    reason: 'node_error',
    message: 'The node failed; the operator finds the cause in the logs',
  };
}
