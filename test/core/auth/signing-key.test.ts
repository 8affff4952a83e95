import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import { SigningKeyStore } from '../../../core/auth/signing-key.ts';
import { SecretRegistry } from '../../../core/log.ts';
import type { Kernel } from '../../../services/kernel.ts';
import { captureLogs } from '../../support/logs.ts';
import {
  describeEachDatabase,
  openTestKernel,
  stickyDatabase,
  type TestDatabase,
} from '../../support/kernel.ts';
import { pino } from 'pino';
import { newWallet, Services } from './support.ts';

const DATA_KEY = 'data-key-for-tests-only-3f9c0e1b7a2d4c68';
const mode = (path: string): number => statSync(path).mode & 0o777;

/** A SQLite database in a data directory that does not exist yet, as `npm start` finds `./data`. */
function sqliteIn(dir: string): TestDatabase {
  return {
    name: 'sqlite',
    fresh: () => ({ url: join(dir, 'data', 'sigil.db'), cleanup: async () => undefined }),
  };
}

describe('data at rest: the SQLite files are private to the service user', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'sigil-data-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('creates the data directory 0700 and the database, its -wal and -shm 0600', async () => {
    const services = await Services.start({ database: sqliteIn(dir) });
    try {
      await services.signIn('runtime', newWallet());
      const file = join(dir, 'data', 'sigil.db');
      expect(mode(join(dir, 'data'))).to.equal(0o700);
      expect(mode(file)).to.equal(0o600);
      for (const companion of ['-wal', '-shm']) {
        expect(existsSync(file + companion), companion).to.equal(true);
        expect(mode(file + companion), companion).to.equal(0o600);
      }
    } finally {
      await services.close();
    }
  });

  it('tightens a database file an earlier version left world-readable', async () => {
    mkdirSync(join(dir, 'data'));
    writeFileSync(join(dir, 'data', 'sigil.db'), '');
    chmodSync(join(dir, 'data', 'sigil.db'), 0o644);
    const kernel = await openTestKernel({ database: sqliteIn(dir) });
    try {
      expect(mode(join(dir, 'data', 'sigil.db'))).to.equal(0o600);
    } finally {
      await kernel.close();
    }
  });
});

describeEachDatabase('data at rest: the session signing key', (database) => {
  const storedKey = async (kernel: Kernel): Promise<string> =>
    ((await kernel.db('signing_keys').where({ purpose: 'session-jwt' }).first()) as { private_jwk: string })
      .private_jwk;

  it('with a data key, is stored sealed (AES-256-GCM) and still verifies tokens after a restart', async () => {
    const sticky = stickyDatabase(database);
    try {
      const config = { database: { dataKey: DATA_KEY } as never };
      const first = await Services.start({ database: sticky.database, config });
      const wallet = newWallet();
      const jwt = await first.signIn('gateway', wallet);
      const stored = await storedKey(first.kernel);
      const key = (await first.kernel.db('signing_keys').first()) as { kid: string };
      await first.close();
      expect(JSON.parse(stored)).to.include.keys('sealed', 'salt', 'iv', 'ciphertext', 'tag');
      expect(JSON.parse(stored)).not.to.have.property('d');
      expect(stored).not.to.include('"kty"');

      const second = await Services.start({ database: sticky.database, config });
      try {
        expect((await second.session('gateway', jwt)).status).to.equal(200);
        expect(((await second.kernel.db('signing_keys').first()) as { kid: string }).kid).to.equal(key.kid);
      } finally {
        await second.close();
      }

      // Without the data key, or with another, the sealed key is never used: a clear error, no new key.
      for (const other of [{}, { database: { dataKey: `${DATA_KEY}-other` } as never }]) {
        const kernel = await openTestKernel({ database: sticky.database, config: other });
        try {
          const store = new SigningKeyStore(kernel.db, new ManualClock(), new SecretRegistry(), undefined, {
            dataKey: (kernel.config.database as { dataKey?: string }).dataKey,
            logger: pino({ level: 'silent' }),
            production: false,
          });
          const err = await store.current().catch((e: unknown) => e);
          expect(err).to.have.property('code', 'config_invalid');
          expect((err as { hint?: string }).hint).to.match(/SIGIL_DATA_KEY/);
          expect(await storedKey(kernel)).to.equal(stored);
        } finally {
          await kernel.close();
        }
      }
    } finally {
      await sticky.drop();
    }
  });

  it('a key stored in plain text is sealed once a data key is configured; without one production warns', async () => {
    const sticky = stickyDatabase(database);
    try {
      const plain = await Services.start({ database: sticky.database });
      const jwt = await plain.signIn('runtime', newWallet());
      expect(JSON.parse(await storedKey(plain.kernel))).to.have.property('d');
      await plain.close();

      const logs = captureLogs();
      const kernel = await openTestKernel({ database: sticky.database });
      try {
        const store = new SigningKeyStore(kernel.db, new ManualClock(), new SecretRegistry(), undefined, {
          dataKey: undefined,
          logger: pino({ level: 'warn' }, logs.stream),
          production: true,
        });
        await store.current();
        expect(logs.text()).to.match(/SIGIL_DATA_KEY/);
        expect(logs.text()).not.to.include(JSON.parse(await storedKey(kernel)).d as string);
      } finally {
        await kernel.close();
      }

      const sealed = await Services.start({
        database: sticky.database,
        config: { database: { dataKey: DATA_KEY } as never },
      });
      try {
        expect((await sealed.session('runtime', jwt)).status).to.equal(200);
        expect(JSON.parse(await storedKey(sealed.kernel))).to.have.property('sealed');
      } finally {
        await sealed.close();
      }
    } finally {
      await sticky.drop();
    }
  });
});
