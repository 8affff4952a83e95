import { expect } from 'chai';
import { wholeLines } from './balancer.ts';

describe('test support: the balancer’s access log', () => {
  const line = (requestId: string) => JSON.stringify({ requestId, upstream: '127.0.0.1:1', status: 200 });

  it('reads the whole lines and leaves a line nginx is still writing for the next read', () => {
    const written = `${line('a')}\n${line('b')}\n`;
    const halfOfC = line('c').slice(0, 20);
    expect(wholeLines(written + halfOfC).map((request) => request.requestId)).to.deep.equal(['a', 'b']);
    expect(wholeLines(`${written}${line('c')}\n`).map((request) => request.requestId)).to.deep.equal([
      'a',
      'b',
      'c',
    ]);
    expect(wholeLines('')).to.deep.equal([]);
  });
});
