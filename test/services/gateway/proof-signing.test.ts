import { randomBytes } from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import { canonicalJson, hmacSha256 } from '../../../core/crypto.ts';
import { ProofSigner, type ProofInput } from '../../../services/gateway/proofs.ts';

/**
 * Signing precomputes what every proof of a signer shares and builds the signature from each field's
 * RFC 8785 form: the proofs must be exactly those of the definitions, a MAC per field over
 * `name \0 RFC8785(value)` and an HMAC over RFC8785 of every field and the field MACs.
 */
describe('execution proof signing', () => {
  const key = randomBytes(32);
  const clock = new ManualClock(Date.UTC(2026, 10, 22, 12, 0, 0));
  const signer = new ProofSigner({
    key: { key, source: 'config' },
    tee: { teeEnabled: false, platform: 'none', keySource: 'config' },
    build: { codeHash: `sha256:${'a'.repeat(64)}`, gitCommit: 'b'.repeat(40) },
    clock,
  });
  const inputs: ProofInput[] = [
    {
      server: {
        id: 'probe',
        package: '@sigil-test/probe-server',
        version: '1.0.0',
        registry: 'npm',
        digest: 'sha512-x',
      },
      tool: 'echo',
      arguments: { message: 'hello' },
      result: { content: [{ type: 'text', text: 'hello' }] },
      secretNames: [],
    },
    {
      server: {
        id: 'memory',
        package: '@modelcontextprotocol/server-memory',
        version: '',
        registry: 'npm',
        digest: '',
      },
      tool: 'create_entities',
      arguments: { z: [1, 2.5, -0, 1e21, { b: null, a: true }], é: 'ünïcödé ✓', '"quoted"': '\n\t\u0001' },
      result: {
        content: [{ type: 'text', text: '{"ok":true}' }],
        isError: false,
        structuredContent: { n: 3 },
      },
      secretNames: ['ZETA_TOKEN', 'ALPHA_KEY'],
    },
  ];

  for (const [index, input] of inputs.entries()) {
    it(`gives the MACs and signature of the definitions (input ${index + 1}), first and from its kept layout`, () => {
      for (const proof of [signer.sign(input), signer.sign({ ...input, server: { ...input.server } })]) {
        const { fieldMacs, signature, ...fields } = proof;
        expect(Object.keys(fieldMacs).sort()).to.deep.equal(Object.keys(fields).sort());
        for (const [name, value] of Object.entries(fields)) {
          expect(fieldMacs[name], name).to.equal(
            hmacSha256(key, `${name}\0${canonicalJson(value)}`).toString('base64url'),
          );
        }
        expect(signature).to.equal(hmacSha256(key, canonicalJson({ ...fields, fieldMacs })).toString('hex'));
        expect(proof.secretNames).to.deep.equal([...input.secretNames].sort());
        expect(
          signer.verify(proof, {
            request: { serverId: input.server.id, tool: input.tool, arguments: input.arguments },
            response: input.result as CallToolResult,
          }),
        ).to.deep.equal({ valid: true, problems: [] });
      }
    });
  }

  it('a server, tool or secret names differing in one string from ones signed before get their own MACs', () => {
    const base = inputs[0] as ProofInput;
    signer.sign(base);
    const variants: ProofInput[] = [
      { ...base, server: { ...base.server, digest: 'sha512-y' } },
      { ...base, server: { ...base.server, version: '1.0.1' } },
      { ...base, tool: 'echo2' },
      { ...base, secretNames: ['A_KEY'] },
      { ...base, secretNames: ['A_KEY', 'B'] },
      // Strings that would run together in a key joined without escaping.
      { ...base, tool: 'a', secretNames: ['B'] },
      { ...base, tool: 'a","B', secretNames: [] },
      { ...base, tool: 'a\u0000B', secretNames: [] },
    ];
    for (const variant of variants) {
      const { fieldMacs, signature: _signature, ...fields } = signer.sign(variant);
      for (const name of ['server', 'tool', 'secretNames'] as const) {
        expect(fieldMacs[name], `${name} of ${JSON.stringify(variant[name])}`).to.equal(
          hmacSha256(key, `${name}\0${canonicalJson(fields[name])}`).toString('base64url'),
        );
      }
    }
  });

  it('a timestamp of another millisecond gets its own MAC, and the one before it still has its own', () => {
    const base = inputs[0] as ProofInput;
    const macs = new Map<string, string>();
    for (const step of [0, 1, 0, 999, -1000]) {
      clock.advance(step);
      const { fieldMacs, timestamp } = signer.sign(base);
      expect(fieldMacs.timestamp, timestamp).to.equal(
        hmacSha256(key, `timestamp\0${canonicalJson(timestamp)}`).toString('base64url'),
      );
      macs.set(timestamp, fieldMacs.timestamp as string);
    }
    expect(macs.size).to.equal(3);
  });

  it('hands out proofs that share nothing another proof could change', () => {
    const first = signer.sign(inputs[0] as ProofInput);
    const second = signer.sign(inputs[0] as ProofInput);
    first.gateway.codeHash = 'changed';
    first.tee.platform = 'changed';
    expect(second.gateway.codeHash).to.equal(`sha256:${'a'.repeat(64)}`);
    expect(second.tee.platform).to.equal('none');
    expect(signer.verify(second).valid).to.equal(true);
    expect(signer.verify(first).problems.map((p) => p.field)).to.deep.equal(['gateway', 'tee']);
  });
});
