import { expect } from 'chai';
import { SigilError, type ErrorCode } from '@sigil/plugin-api';
import { STATUS_BY_CODE } from '../../core/http/errors.ts';
import {
  httpStatusOf,
  jsonRpcErrorOf,
  MCP_ANSWER_BY_CODE,
  MISSING_CLIENT_CAPABILITY_CODE,
  UNKNOWN_TOOL,
} from '../../core/http/mcp-errors.ts';

/** How each code reaches a caller: its HTTP status, and over MCP a JSON-RPC error code or a tool error. */
const EXPECTED: Record<ErrorCode, [status: number, mcp: number | 'tool_error']> = {
  invalid_request: [400, -32602],
  unauthorized: [401, 'tool_error'],
  payment_required: [402, 402],
  capability_required: [400, -32021],
  forbidden: [403, 'tool_error'],
  not_found: [404, 'tool_error'],
  method_not_allowed: [405, 'tool_error'],
  conflict: [409, 'tool_error'],
  payload_too_large: [413, -32602],
  unsupported_media_type: [415, 'tool_error'],
  misdirected_request: [421, 'tool_error'],
  proof_invalid: [422, 'tool_error'],
  rate_limited: [429, -32029],
  internal: [500, 'tool_error'],
  config_invalid: [500, 'tool_error'],
  plugin_invalid: [500, 'tool_error'],
  unavailable: [503, 'tool_error'],
};

const seenOverMcp = (error: SigilError): number | 'tool_error' => jsonRpcErrorOf(error)?.code ?? 'tool_error';

describe('error tables: every code over HTTP and over MCP', () => {
  it('name the same codes, every one of them', () => {
    const codes = Object.keys(EXPECTED).sort();
    expect(Object.keys(STATUS_BY_CODE).sort()).to.deep.equal(codes);
    expect(Object.keys(MCP_ANSWER_BY_CODE).sort()).to.deep.equal(codes);
  });

  for (const [code, [status, mcp]] of Object.entries(EXPECTED) as [ErrorCode, [number, number | string]][]) {
    it(`${code}: HTTP ${status}, MCP ${mcp}`, () => {
      const error = new SigilError(code, `a ${code} failure`, {
        hint: 'do this',
        details: { serverId: 's' },
      });
      expect(STATUS_BY_CODE[code]).to.equal(status);
      expect(seenOverMcp(error)).to.equal(mcp);
      const jsonRpc = jsonRpcErrorOf(error);
      if (jsonRpc && code !== 'payment_required') {
        // The stable code and the details, for clients that branch on them; the message as it is.
        expect(jsonRpc).to.deep.equal({
          code: mcp,
          message: `a ${code} failure`,
          data: { code, serverId: 's' },
        });
      }
    });
  }

  it('answers MCP 2026-07-28 clients with the same errors, retry-later as 429 and 503 (outside the range it reserves)', () => {
    for (const [code, [status, mcp]] of Object.entries(EXPECTED) as [
      ErrorCode,
      [number, number | string],
    ][]) {
      const error = new SigilError(code, `a ${code} failure`, { details: { retryAfterSeconds: 1 } });
      const modern = jsonRpcErrorOf(error, 'modern');
      const expected =
        code === 'rate_limited' || code === 'unavailable' ? status : mcp === 'tool_error' ? undefined : mcp;
      expect(modern?.code, code).to.equal(expected);
      // The range is the spec's: only the code it defines there for this error is in it.
      if (modern)
        expect(modern.code <= -32020 && modern.code >= -32099, code).to.equal(
          modern.code === MISSING_CLIENT_CAPABILITY_CODE,
        );
      if (modern)
        expect({ ...modern, code: 0 }).to.deep.equal({ ...jsonRpcErrorOf(error, 'legacy'), code: 0 });
    }
  });

  it('answers capability_required (MCP 2026-07-28 -32021) with its HTTP status, every other JSON-RPC error with 200', () => {
    for (const code of Object.keys(EXPECTED) as ErrorCode[]) {
      const error = new SigilError(code, `a ${code} failure`, { details: { retryAfterSeconds: 1 } });
      if (jsonRpcErrorOf(error) === undefined) continue;
      expect(httpStatusOf(error), code).to.equal(code === 'capability_required' ? 400 : 200);
    }
    const missing = new SigilError('capability_required', 'Tool "t" needs a client capability (sampling)', {
      details: { serverId: 's', tool: 't', requiredCapabilities: { sampling: {} } },
    });
    expect(jsonRpcErrorOf(missing, 'modern')).to.deep.equal({
      code: -32021,
      message: 'Tool "t" needs a client capability (sampling)',
      data: { code: 'capability_required', serverId: 's', tool: 't', requiredCapabilities: { sampling: {} } },
    });
  });

  it('makes an unknown tool a JSON-RPC error, and any other not_found (a server, a package) a tool error', () => {
    const unknownTool = new SigilError('not_found', 'MCP server "s" has no tool "t"', {
      details: { reason: UNKNOWN_TOOL, serverId: 's', tool: 't' },
    });
    expect(jsonRpcErrorOf(unknownTool)).to.deep.equal({
      code: -32602,
      message: 'MCP server "s" has no tool "t"',
      data: { code: 'not_found', reason: UNKNOWN_TOOL, serverId: 's', tool: 't' },
    });
    const missingPackage = new SigilError('not_found', '@x/y@1.0.0: 404 Not Found', {
      details: { reason: 'not_found', package: '@x/y@1.0.0' },
    });
    expect(seenOverMcp(missingPackage)).to.equal('tool_error');
  });

  it('makes unavailable a JSON-RPC error with retryAfterSeconds only when it says when to retry', () => {
    const atCapacity = new SigilError('unavailable', 'Every process is busy', {
      hint: 'Retry after 1 s',
      details: { retryAfterSeconds: 1 },
    });
    expect(jsonRpcErrorOf(atCapacity)).to.deep.equal({
      code: -32053,
      message: 'Every process is busy',
      data: { code: 'unavailable', retryAfterSeconds: 1 },
    });
    const notStarted = new SigilError('unavailable', 'MCP server "s" did not start: it exited');
    expect(seenOverMcp(notStarted)).to.equal('tool_error');
  });

  it("answers payment_required with x402's terms as data, the hint beside them and in the message", () => {
    const terms = { x402Version: 2, accepts: [{ scheme: 'exact' }] };
    const unpaid = new SigilError('payment_required', 'Payment required', {
      hint: 'Sign the terms',
      details: { paymentRequired: terms },
    });
    expect(jsonRpcErrorOf(unpaid)).to.deep.equal({
      code: 402,
      message: 'Payment required (Sign the terms)',
      data: { ...terms, hint: 'Sign the terms' },
    });
  });
});
