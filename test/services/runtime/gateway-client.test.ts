import { expect } from 'chai';
import { gatewayScopeOf } from '../../../services/runtime/gateway-client.ts';

describe('runtime gateway client: the gateway scope of a chat session or a canvas run', () => {
  const owner = {
    wallet: '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01',
    id: '6f1c2f7e-58f4-4d8e-9a51-1f0b9e4c2d3a',
  };

  it('keeps the X-MCP-Session ids chat and canvas had before they shared one helper', () => {
    // The gateway keeps a session's enabled servers under its id: a changed digest would orphan them.
    expect(gatewayScopeOf('chat', owner)).to.deep.equal({
      wallet: owner.wallet,
      session: 'chat.1kkWrMM_i4iFtXZQBCoHlRrwOyAviDdaQbXRNAhPFmE',
    });
    expect(gatewayScopeOf('canvas', owner).session).to.equal(
      'canvas.T8C-JwFleixGZO1bKScA3Fp1rultjCYAhVqsvBN6UVo',
    );
  });

  it('gives one id per wallet and owner id, whatever the address case, never the owner id itself', () => {
    const lower = { ...owner, wallet: owner.wallet.toLowerCase() };
    expect(gatewayScopeOf('canvas', lower).session).to.equal(gatewayScopeOf('canvas', owner).session);
    const sessions = new Set([
      gatewayScopeOf('canvas', owner).session,
      gatewayScopeOf('chat', owner).session,
      gatewayScopeOf('canvas', { ...owner, id: 'another-run' }).session,
      gatewayScopeOf('canvas', { ...owner, wallet: `0x${'1'.repeat(40)}` }).session,
    ]);
    expect(sessions.size).to.equal(4);
    for (const session of sessions) expect(session).to.not.include(owner.id);
  });
});
