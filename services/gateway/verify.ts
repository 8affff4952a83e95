import Router from '@koa/router';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import { parseInput } from '../../core/http/validate.ts';
import type { AuthPrincipal } from '../../core/auth/index.ts';
import type { Payments } from './payments/payments.ts';
import { paymentFromHeaders, setPaymentResponse } from './payments/routes.ts';
import { proofSchema, type ProofCheck, type ProofSigner } from './proofs.ts';

export const verifyBody = z
  .object({
    proof: proofSchema,
    /**
     * The request the proof should cover: server id, tool name and arguments, and the
     * `inputResponses` of an MCP 2026-07-28 retry (a call answered `input_required` first).
     */
    request: z
      .object({
        serverId: z.string(),
        tool: z.string(),
        arguments: z.record(z.string(), z.unknown()),
        inputResponses: z.record(z.string(), z.unknown()).optional(),
      })
      .strict()
      .optional(),
    /** The tool result the proof should cover (its `_meta` is ignored). */
    response: z
      .object({ content: z.array(z.unknown()) })
      .passthrough()
      .optional(),
  })
  .strict();

/**
 * `POST /api/verify`: checks an execution proof; a changed field is refused with the field named.
 * `publicUrl`: the gateway's configured public URL, which names the paid resource (never a request header).
 */
export function verifyRouter(
  proofs: () => Promise<ProofSigner>,
  payments: Payments | undefined,
  publicUrl: string,
): Router {
  const resource = { url: `${publicUrl}/api/verify`, description: 'Verify an execution proof' };
  return new Router().post('/api/verify', async (ctx) => {
    const { proof, request, response } = parseInput(verifyBody, ctx.request.body ?? {}, 'body');
    const verify = async () => {
      const value = (await proofs()).verify(proof, {
        ...(request ? { request } : {}),
        ...(response ? { response: response as CallToolResult } : {}),
      });
      // A verification that ran is the service paid for, whatever its verdict.
      return { value, succeeded: true };
    };
    let check: ProofCheck;
    if (payments) {
      const paid = await payments.run(
        await paymentFromHeaders(ctx),
        resource,
        (ctx.state.auth as AuthPrincipal | undefined)?.address,
        verify,
      );
      await setPaymentResponse(ctx, paid.receipt);
      check = paid.value;
    } else {
      check = (await verify()).value;
    }
    if (!check.valid) {
      const fields = check.problems.map((problem) => problem.field);
      throw new SigilError(
        'proof_invalid',
        `Proof rejected: ${check.problems.map((p) => `${p.field} ${p.message}`).join('; ')}`,
        {
          details: { fields, problems: check.problems },
        },
      );
    }
    ctx.body = {
      valid: true,
      id: proof.id,
      server: proof.server,
      tool: proof.tool,
      timestamp: proof.timestamp,
      keySource: proof.keySource,
      tee: proof.tee,
    };
  });
}
