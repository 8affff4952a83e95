import { once } from 'node:events';
import { expect } from 'chai';
import { ActiveRun } from '../../../../services/runtime/canvas/active-run.ts';
import type { RunRecord } from '../../../../services/runtime/canvas/runs.ts';
import type { ValidatedWorkflow } from '../../../../services/runtime/canvas/validate.ts';

/** A run with no nodes: what its attempts' aborts need of it is its own abort. */
const activeRun = () =>
  new ActiveRun({ id: 'run' } as RunRecord, { order: [] } as unknown as ValidatedWorkflow);

describe('canvas node attempts’ aborts', () => {
  it('aborts every running attempt with the run, and a signal asked for afterwards is aborted too', () => {
    const run = activeRun();
    const read = run.attemptAbort(60_000);
    const held = read.signal;
    const unread = run.attemptAbort(60_000);
    const reason = new Error('cancelled');
    run.abort.abort(reason);
    expect(held.aborted).to.equal(true);
    expect(held.reason).to.equal(reason);
    expect(unread.signal.aborted).to.equal(true);
    expect(unread.signal.reason).to.equal(reason);
    expect(() => unread.throwIfAborted()).to.throw(reason.message);
    read.done();
    unread.done();
  });

  it('leaves an attempt that is done alone when the run is aborted later', () => {
    const run = activeRun();
    const attempt = run.attemptAbort(60_000);
    attempt.done();
    run.abort.abort(new Error('cancelled'));
    expect(attempt.aborted).to.equal(false);
  });

  it('aborts an attempt at its timeout with a TimeoutError', async () => {
    const attempt = activeRun().attemptAbort(20);
    const { signal } = attempt;
    await once(signal, 'abort');
    expect((signal.reason as DOMException).name).to.equal('TimeoutError');
    attempt.done();
  });

  it('starts an attempt of a run already aborted aborted', () => {
    const run = activeRun();
    run.abort.abort(new Error('stopping'));
    const attempt = run.attemptAbort(60_000);
    expect(attempt.aborted).to.equal(true);
    attempt.done();
  });
});
