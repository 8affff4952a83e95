import { expect } from 'chai';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { canvasUser, type CanvasWorld, execute, startCanvasWorld, workflow } from './support.ts';

const MAX_ACTIVE_RUNS = 2;
const MAX_WORKFLOWS = 2;
/** Requests sent at once, each racing for the last free places. */
const RACING = 8;

/**
 * A wallet's limits kept in the database (docs/canvas.md): counted and taken in one transaction under
 * the wallet's lock, so requests racing, on one replica or several, never pass them together.
 */
describeEachDatabase('canvas limits under concurrent requests', (database) => {
  let world: CanvasWorld;

  before(async () => {
    world = await startCanvasWorld({
      database,
      canvas: { maxActiveRuns: MAX_ACTIVE_RUNS, maxWorkflowsPerWallet: MAX_WORKFLOWS },
    });
  });
  after(async () => {
    await world.close();
    world.removeData();
  });

  it('of runs started at once, as many as maxActiveRuns start and the rest are refused (429), and nothing of them is stored', async () => {
    const user = await canvasUser(world.stack);
    const hanging = { workflow: workflow([{ id: 'wait', kind: 'hang' }]) };
    const responses = await Promise.all(Array.from({ length: RACING }, () => execute(user, hanging)));
    const started = responses.filter((res) => res.status === 200);
    const refused = responses.filter((res) => res.status !== 200);
    expect(started).to.have.length(MAX_ACTIVE_RUNS);
    for (const res of refused) {
      expect(res.status).to.equal(429);
      expect(((await res.json()) as { details: unknown }).details).to.deep.equal({
        reason: 'too_many_active_runs',
        limit: MAX_ACTIVE_RUNS,
      });
    }
    const listed = await user.client.json('GET', '/canvas/runs');
    expect((listed.body.runs as unknown[]).length).to.equal(MAX_ACTIVE_RUNS);
  });

  it('of workflows saved at once, as many as maxWorkflowsPerWallet are stored and the rest are refused (409)', async () => {
    const user = await canvasUser(world.stack);
    const responses = await Promise.all(
      Array.from({ length: RACING }, () =>
        user.client.json('POST', '/canvas/workflows', { workflow: workflow([{ id: 'a', kind: 'emit' }]) }),
      ),
    );
    const saved = responses.filter((res) => res.status === 201);
    const refused = responses.filter((res) => res.status !== 201);
    expect(saved).to.have.length(MAX_WORKFLOWS);
    for (const res of refused) {
      expect(res.status).to.equal(409);
      expect(res.body.details).to.deep.equal({ reason: 'too_many_workflows', limit: MAX_WORKFLOWS });
    }
    expect((await user.client.json('GET', '/canvas/workflows')).body.workflows).to.have.length(MAX_WORKFLOWS);
  });
});
