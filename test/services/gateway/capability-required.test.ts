import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { Redactor } from '@sigil/plugin-api';
import { jsonRpcErrorOf } from '../../../core/http/mcp-errors.ts';
import { capabilityRequired } from '../../../services/gateway/input-required.ts';
import { MAX_RESULT_DEPTH } from '../../../services/gateway/tool-results.ts';

const SECRET = 'sk-live-capability-canary';
const call = { serverId: 'modern', tool: 'ask' };
const serverError = (data: unknown) => new McpError(-32021, `needs sampling, says ${SECRET}`, data);

/**
 * A modern server's -32021 as a 2026-07-28 caller receives it (the gateway's own `capability_required`):
 * the capabilities as the server named them, cleaned as its results are, and nothing else it said.
 */
describe('gateway: a server’s -32021 relayed as capability_required', () => {
  it('keeps requiredCapabilities as the server named them, and names them in the message', () => {
    const error = capabilityRequired(
      call,
      serverError({ requiredCapabilities: { sampling: { tools: {} }, elicitation: { form: {} } } }),
      Redactor.none,
    );
    expect(jsonRpcErrorOf(error, 'modern')).to.deep.equal({
      code: -32021,
      message:
        'Tool "ask" needs a client capability (sampling, elicitation) that the request did not declare',
      data: {
        code: 'capability_required',
        serverId: 'modern',
        tool: 'ask',
        requiredCapabilities: { sampling: { tools: {} }, elicitation: { form: {} } },
      },
    });
  });

  it('redacts the server’s secrets in the capabilities, names and values, and passes nothing else on', () => {
    const error = capabilityRequired(
      call,
      serverError({
        requiredCapabilities: { sampling: { note: `token ${SECRET}` }, [SECRET]: {} },
        debug: SECRET,
      }),
      Redactor.of([SECRET]),
    );
    const answer = JSON.stringify(jsonRpcErrorOf(error, 'modern'));
    expect(answer).to.not.include(SECRET);
    expect(error.details?.requiredCapabilities)
      .to.have.nested.property('sampling.note')
      .that.includes('token ');
    expect(error.details).to.not.have.property('debug');
    expect(error.message).to.not.include('says');
  });

  it('relays the error without capabilities when the server named none, or not as an object, or nested too deep', () => {
    let deep: Record<string, unknown> = {};
    for (let level = 0; level < MAX_RESULT_DEPTH + 1; level += 1) deep = { sampling: deep };
    for (const data of [
      undefined,
      'sampling',
      { requiredCapabilities: ['sampling'] },
      { requiredCapabilities: deep },
    ]) {
      const error = capabilityRequired(call, serverError(data), Redactor.none);
      expect(error.code).to.equal('capability_required');
      expect(error.message).to.equal('Tool "ask" needs a client capability that the request did not declare');
      expect(error.details).to.deep.equal({ serverId: 'modern', tool: 'ask' });
    }
  });
});
