import { expect } from 'chai';
import { stickyDatabase, TEST_DATABASES } from '../../support/kernel.ts';
import { captureLogs } from '../../support/logs.ts';
import { pluginsWithTee, Stack } from './support.ts';

/**
 * Two providers offering the same model: chats use the first in `plugins`, and the runtime says so
 * when it starts (a trial found the other provider answering, with no word of why).
 */
describe('runtime chat: a model two providers offer', function () {
  this.timeout(60_000);
  const sticky = stickyDatabase(TEST_DATABASES[0]!);
  let stack: Stack | undefined;
  const logs = captureLogs();

  before(async () => {
    stack = await Stack.start({
      database: sticky.database,
      logs: logs.stream,
      config: {
        plugins: [
          ...pluginsWithTee({ resolve: 'tee-none', enabled: true, options: {} }),
          { resolve: 'provider-local', id: 'first-local', enabled: true, options: {} },
          { resolve: 'provider-local', id: 'second-local', enabled: true, options: {} },
        ],
      },
    });
  });
  after(async () => {
    await stack?.close();
    await sticky.drop();
  });

  it('warns at start of each shared model, naming the providers and the one chats use', async () => {
    await stack!.runtime.start(); // what serve() does once the runtime listens
    const warning = logs
      .text()
      .split('\n')
      .filter((line) => line.includes('"model":"sigil-echo"'))
      .map((line) => JSON.parse(line) as { level: number; msg: string; providers: string[] });
    expect(warning, logs.text()).to.have.length(1);
    expect(warning[0]!.providers).to.deep.equal(['first-local', 'second-local']);
    expect(warning[0]!.msg).to.include('chats use first-local');
    expect((await stack!.runtime.chat.providerFor('sigil-echo'))?.name).to.equal('first-local');
  });
});
