import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { expect } from 'chai';
import { createLogger } from '../../../core/log.ts';
import { SecretVault } from '../../../services/gateway/secrets/vault.ts';

const alice = '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01';
const bob = '0x1111111111111111111111111111111111111111';
const master = 'canary-master-key-for-vault-tests-0123456789';

describe('gateway secret vault', () => {
  let dir: string;
  let warnings: string[];
  const vault = (masterKey: string | undefined, persistenceDir: string | undefined = dir) =>
    new SecretVault({
      masterKey,
      persistenceDir,
      logger: createLogger({
        level: 'warn',
        destination: new Writable({
          write(chunk: Buffer, _encoding, done) {
            warnings.push(chunk.toString());
            done();
          },
        }),
      }),
    });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-vault-'));
    warnings = [];
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps secrets per wallet and per server', async () => {
    const v = vault(master);
    await v.put(alice, 'memory', { API_TOKEN: 'alice-memory' });
    await v.put(alice, 'search', { API_TOKEN: 'alice-search' });
    await v.put(bob, 'memory', { API_TOKEN: 'bob-memory' });
    expect(await v.get(alice, 'memory')).to.deep.equal({ API_TOKEN: 'alice-memory' });
    expect(await v.get(alice, 'search')).to.deep.equal({ API_TOKEN: 'alice-search' });
    expect(await v.get(bob, 'memory')).to.deep.equal({ API_TOKEN: 'bob-memory' });
    expect(await v.get(bob, 'search')).to.deep.equal({});
    expect(await v.get(alice.toLowerCase(), 'memory')).to.deep.equal({ API_TOKEN: 'alice-memory' });
  });

  it('persists only ciphertext, with no wallet address, and survives a new instance', async () => {
    await vault(master).put(alice, 'memory', {
      API_TOKEN: 'canary-secret-value-1',
      OTHER: 'canary-secret-value-2',
    });
    const files = readdirSync(join(dir, 'gateway-secrets'));
    expect(files).to.have.length(1);
    const stored = readFileSync(join(dir, 'gateway-secrets', files[0] as string), 'utf8');
    for (const forbidden of [
      'canary-secret-value',
      alice.toLowerCase().slice(2),
      alice.slice(2),
      'API_TOKEN',
    ]) {
      expect(stored).not.to.include(forbidden);
    }
    expect(await vault(master).names(alice, 'memory')).to.deep.equal(['API_TOKEN', 'OTHER']);
  });

  it('cannot decrypt with another master key, nor a tampered entry', async () => {
    await vault(master).put(alice, 'memory', { API_TOKEN: 'x-secret-value' });
    expect(await vault('another-master-key-0123456789abcdef0123').get(alice, 'memory')).to.deep.equal({});
    const file = join(dir, 'gateway-secrets', readdirSync(join(dir, 'gateway-secrets'))[0] as string);
    const entry = JSON.parse(readFileSync(file, 'utf8')) as { ciphertext: string };
    const bytes = Buffer.from(entry.ciphertext, 'base64');
    bytes[0] = (bytes[0] ?? 0) ^ 1;
    writeFileSync(file, JSON.stringify({ ...entry, ciphertext: bytes.toString('base64') }));
    const err = await vault(master)
      .get(alice, 'memory')
      .catch((e: unknown) => e);
    expect(err).to.be.instanceOf(Error);
  });

  it('deletes one secret or all of them', async () => {
    const v = vault(master);
    await v.put(alice, 'memory', { A_TOKEN: 'first-value', B_TOKEN: 'second-value' });
    expect(await v.delete(alice, 'memory', 'A_TOKEN')).to.equal(true);
    expect(await v.names(alice, 'memory')).to.deep.equal(['B_TOKEN']);
    expect(await v.delete(alice, 'memory', 'A_TOKEN')).to.equal(false);
    expect(await v.delete(alice, 'memory')).to.equal(true);
    expect(readdirSync(join(dir, 'gateway-secrets'))).to.deep.equal([]);
    expect(await v.delete(alice, 'memory')).to.equal(false);
  });

  it('says at start-up that secrets are memory-only without GATEWAY_SECRET_KEY, and writes nothing', async () => {
    const v = vault(undefined);
    expect(v.mode).to.equal('memory');
    expect(warnings.join('')).to.match(/secrets are memory-only: set GATEWAY_SECRET_KEY/);
    await v.put(alice, 'memory', { API_TOKEN: 'memory-only-value' });
    expect(await v.get(alice, 'memory')).to.deep.equal({ API_TOKEN: 'memory-only-value' });
    expect(readdirSync(dir)).to.deep.equal([]);
  });
});
