import { createHash, randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import {
  ProofSigner,
  proofSchema,
  requestHash,
  type ExecutionProof,
  type ProofInput,
} from '../../../services/gateway/proofs.ts';
import {
  codeFileHashes,
  codeFileHashesAsync,
  computeBuildInfo,
  buildInfo,
} from '../../../services/shared/build-info.ts';

const input: ProofInput = {
  server: {
    id: 'probe',
    package: '@sigil-test/probe-server',
    version: '1.0.0',
    registry: 'npm',
    digest: 'sha512-abc',
  },
  tool: 'echo',
  arguments: { message: 'hello' },
  result: { content: [{ type: 'text', text: 'hello' }] },
  secretNames: ['API_TOKEN'],
};

/** A copy of the proof with one leaf changed, whatever its type. */
function tamper(proof: ExecutionProof, path: string[]): ExecutionProof {
  const copy = structuredClone(proof) as unknown as Record<string, unknown>;
  let node = copy;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string, unknown>;
  const last = path[path.length - 1] as string;
  const value = node[last];
  node[last] =
    typeof value === 'boolean'
      ? !value
      : typeof value === 'number'
        ? value + 1
        : Array.isArray(value)
          ? [...value, 'EXTRA']
          : `${String(value)}x`;
  return copy as unknown as ExecutionProof;
}

/** Every leaf path of the signed part of a proof. */
function leafPaths(value: unknown, prefix: string[] = []): string[][] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return [prefix];
  return Object.entries(value).flatMap(([key, child]) => leafPaths(child, [...prefix, key]));
}

describe('execution proofs', () => {
  const signer = new ProofSigner({
    key: { key: new Uint8Array(randomBytes(32)), source: 'config' },
    tee: { teeEnabled: false, platform: 'none', keySource: 'config' },
    build: buildInfo(),
    clock: new ManualClock(Date.UTC(2026, 10, 22, 12)),
  });

  it('carries every field the spec names, and verifies', () => {
    const proof = signer.sign(input);
    expect(proofSchema.safeParse(proof).success).to.equal(true);
    expect(proof.gateway.codeHash).to.match(/^[0-9a-f]{64}$/);
    expect(proof).to.include({
      tool: 'echo',
      canonicalization: 'RFC8785',
      keySource: 'config',
      timestamp: '2026-11-22T12:00:00.000Z',
    });
    expect(proof.secretNames).to.deep.equal(['API_TOKEN']);
    expect(proof.signature).to.match(/^[0-9a-f]{64}$/);
    expect(
      signer.verify(proof, {
        request: { serverId: 'probe', tool: 'echo', arguments: { message: 'hello' } },
        response: input.result,
      }),
    ).to.deep.equal({
      valid: true,
      problems: [],
    });
  });

  it('rejects a change to any field, naming the field', () => {
    const proof = signer.sign(input);
    const { fieldMacs: _macs, signature: _signature, ...signed } = proof;
    const paths = leafPaths(signed);
    expect(paths.length).to.be.greaterThan(14);
    for (const path of paths) {
      const check = signer.verify(tamper(proof, path));
      expect(check.valid, path.join('.')).to.equal(false);
      expect(
        check.problems.map((p) => p.field),
        path.join('.'),
      ).to.deep.equal([path[0]]);
    }
  });

  it('rejects a changed signature or field MAC, and a proof signed with another key', () => {
    const proof = signer.sign(input);
    expect(signer.verify(tamper(proof, ['signature'])).problems.map((p) => p.field)).to.deep.equal([
      'signature',
    ]);
    expect(signer.verify(tamper(proof, ['fieldMacs', 'tool'])).problems.map((p) => p.field)).to.deep.equal([
      'tool',
    ]);
    const other = new ProofSigner({
      key: { key: new Uint8Array(randomBytes(32)), source: 'config' },
      tee: { teeEnabled: false, platform: 'none', keySource: 'config' },
      build: buildInfo(),
      clock: new ManualClock(),
    });
    expect(signer.verify(other.sign(input)).valid).to.equal(false);
  });

  it('names the hash that does not match a given request or response', () => {
    const proof = signer.sign(input);
    const check = signer.verify(proof, {
      request: { serverId: 'probe', tool: 'echo', arguments: { message: 'HELLO' } },
      response: { content: [{ type: 'text', text: 'other' }] },
    });
    expect(check.problems.map((p) => p.field)).to.deep.equal(['requestHash', 'responseHash']);
  });

  it('hashes a request without inputResponses as it always did: SHA-256 of { serverId, tool, arguments }', () => {
    const proof = signer.sign(input);
    const canonical = '{"arguments":{"message":"hello"},"serverId":"probe","tool":"echo"}';
    expect(proof.requestHash).to.equal(createHash('sha256').update(canonical).digest('hex'));
    expect(requestHash('probe', 'echo', { message: 'hello' })).to.equal(proof.requestHash);
  });

  it('binds a retried call’s inputResponses: verifies with them, not with others, not without them', () => {
    const inputResponses = { user_name: { action: 'accept', content: { name: 'Ada' } } };
    const proof = signer.sign({ ...input, inputResponses });
    const request = { serverId: 'probe', tool: 'echo', arguments: { message: 'hello' } };
    expect(signer.verify(proof, { request: { ...request, inputResponses } })).to.deep.equal({
      valid: true,
      problems: [],
    });
    for (const [what, other] of [
      ['other answers', { ...request, inputResponses: { user_name: { action: 'decline' } } }],
      ['no answers', request],
      ['empty answers', { ...request, inputResponses: {} }],
    ] as const) {
      expect(
        signer.verify(proof, { request: other }).problems.map((p) => p.field),
        what,
      ).to.deep.equal(['requestHash']);
    }
    // And a proof of a call without them is not one of a call with them.
    expect(
      signer
        .verify(signer.sign(input), { request: { ...request, inputResponses } })
        .problems.map((p) => p.field),
    ).to.deep.equal(['requestHash']);
  });

  it('finds that no proof covers a value with no RFC 8785 form (a lone surrogate, 1e400, deep nesting), instead of throwing', () => {
    const proof = signer.sign(input);
    let deep: unknown = 'bottom';
    for (let level = 0; level < 100_000; level += 1) deep = [deep];
    for (const [what, value] of [
      ['a lone surrogate', '\ud800'],
      ['1e400', Infinity],
      ['deep nesting', deep],
    ] as const) {
      const check = signer.verify(
        { ...proof, tool: typeof value === 'string' ? value : proof.tool },
        {
          request: { serverId: 'probe', tool: 'echo', arguments: { message: value } },
          response: { content: [{ type: 'text', text: 'hello' }], structuredContent: { value } },
        },
      );
      const fields = check.problems.map((p) => p.field);
      expect(fields, what).to.include.members(['requestHash', 'responseHash']);
      if (typeof value === 'string') expect(fields).to.include('tool');
    }
  });

  it('verifies against the result as MCP 2026-07-28 frames it (resultType "complete"), and against nothing else', () => {
    const proof = signer.sign(input);
    const framed = { ...input.result, resultType: 'complete' } as ProofInput['result'];
    expect(signer.verify(proof, { response: framed }).valid).to.equal(true);
    const otherFraming = { ...input.result, resultType: 'input_required' } as ProofInput['result'];
    expect(signer.verify(proof, { response: otherFraming }).problems.map((p) => p.field)).to.deep.equal([
      'responseHash',
    ]);
  });

  it('hashes the response without its _meta, so the proof it carries does not change its hash', () => {
    const proof = signer.sign(input);
    expect(signer.verify(proof, { response: { ...input.result, _meta: { anything: true } } }).valid).to.equal(
      true,
    );
  });

  it('computes the code hash from the sources and reads the git commit without git', () => {
    const info = computeBuildInfo(
      { code: process.cwd(), repository: process.cwd() },
      { SIGIL_GIT_COMMIT: 'abc123' },
    );
    expect(info.gitCommit).to.equal('abc123');
    expect(info.codeHash).to.equal(buildInfo().codeHash);
    expect(info.files).to.be.greaterThan(50);
    expect(info.compiled).to.equal(false);
    expect(info.builtAt).to.equal(null);
  });

  it('computes the same build info in the background, and from the file hashes a build records', async () => {
    const roots = { code: process.cwd(), repository: process.cwd() };
    const atOnce = computeBuildInfo(roots);
    const hashes = await codeFileHashesAsync(process.cwd());
    expect(hashes).to.deep.equal(codeFileHashes(process.cwd()));
    expect(computeBuildInfo(roots, process.env, hashes)).to.deep.equal(atOnce);
    // What a build's manifest (build.json) records stands in for reading the code: a changed hash shows.
    const manifest = { builtAt: '2026-11-27T00:00:00.000Z', sourceRoot: '.', inputs: [], codeFiles: hashes };
    const recorded = computeBuildInfo({ ...roots, build: manifest });
    expect(recorded).to.deep.equal({ ...atOnce, compiled: true, builtAt: manifest.builtAt });
    const tampered = hashes.map(
      ([file, hash], i) => [file, i === 0 ? 'ab'.repeat(32) : hash] as [string, string],
    );
    expect(computeBuildInfo({ ...roots, build: { ...manifest, codeFiles: tampered } }).codeHash).not.to.equal(
      atOnce.codeHash,
    );
  });
});
