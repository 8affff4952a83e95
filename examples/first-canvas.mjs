// A first canvas workflow, every step over HTTP as the dev wallet: a model drafts a page, the owner
// approves it (from a second request), it is written into the run's workspace, pushed to a git
// repository served by a local `git daemon`, and checked in a browser; then what it cost, on the ledger.
//   node examples/first-canvas.mjs [runtime URL, default http://127.0.0.1:8080]
// Needs git (a `git daemon` on 127.0.0.1:9418, which `npm start` lets canvas-git push to) and, for the
// browser node, Debian's chromium.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { account } from './dev-wallet.mjs';
import {
  call,
  deposit,
  refusal,
  request,
  runtimeUrl,
  serverSentEvents,
  signIn,
  storeProviderKey,
} from './runtime-client.mjs';

const TOPIC = process.env.SIGIL_TOPIC ?? 'Hello from Sigil';
const GIT_PORT = 9418;

/** The workflow: draft → approve → page → write → push → verify. */
const workflow = {
  format: 'sigil.canvas.workflow/v1',
  name: 'draft, approve, publish and check a page',
  inputs: { topic: { type: 'string' } },
  nodes: [
    {
      id: 'draft',
      kind: 'llm',
      params: {
        inputs: { topic: 'string' },
        // The stand-in model echoes this (already a page); a real model writes one.
        prompt:
          '<!doctype html><title>{{inputs.topic}}</title><h1>{{inputs.topic}}</h1><p>Reply with a short HTML page under this heading, nothing else.</p>',
      },
    },
    { id: 'approve', kind: 'approval', params: { message: 'Publish this page?' } },
    {
      id: 'page',
      kind: 'transform',
      params: {
        inputs: { html: 'json' },
        outputs: { files: { type: 'files', files: [{ path: 'index.html', template: '{{inputs.html}}' }] } },
      },
    },
    { id: 'write', kind: 'write-files', params: { message: 'The approved page' } },
    {
      id: 'push',
      kind: 'git-push',
      params: { remote: 'set below', branch: 'main', message: 'Publish the approved page' },
    },
    {
      id: 'verify',
      kind: 'browser-verify',
      params: {
        url: '{{workspace.previewUrl}}index.html',
        assertions: [{ status: 200 }, { selector: 'h1', visible: true }, { text: TOPIC }],
      },
    },
  ],
  edges: [
    { from: '$inputs.topic', to: 'draft.topic' },
    { from: 'draft.text', to: 'approve.value' },
    { from: 'approve.value', to: 'page.html' },
    { from: 'page.files', to: 'write.files' },
    { from: 'write.commit', to: 'push.after' },
    // The check waits for the push (the page it opens is the run's preview, not the pushed commit).
    { from: 'push.commit', to: 'verify.after' },
  ],
};

/** A bare repository served by `git daemon` (receive-pack on) from a folder of its own. */
function startGitDaemon() {
  const base = mkdtempSync(join(tmpdir(), 'sigil-first-canvas-'));
  execFileSync('git', ['init', '--quiet', '--bare', '--initial-branch=main', join(base, 'site.git')]);
  const daemon = spawn(
    'git',
    [
      'daemon',
      // With --verbose it says "Ready to rumble" once its own sockets listen (and why not, when they cannot).
      '--verbose',
      '--reuseaddr',
      '--export-all',
      '--enable=receive-pack',
      `--base-path=${base}`,
      '--listen=127.0.0.1',
      `--port=${GIT_PORT}`,
      base,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const ready = new Promise((resolve, reject) => {
    daemon.on('error', (error) =>
      reject(new Error(`cannot start git daemon: ${error.message} (is git installed?)`)),
    );
    // Its log is read to the end (a pipe nobody reads would fill up and stall it). Only this line of
    // its own says it listens: a connection to the port might reach another daemon on it.
    let said = '';
    daemon.stderr.setEncoding('utf8');
    daemon.stderr.on('data', (chunk) => {
      said = (said + chunk).slice(-2000);
      if (said.includes('Ready to rumble')) resolve();
    });
    // 'close', not 'exit': its last lines, which say why it stopped, have been read by then.
    daemon.on('close', (code) => {
      const why = said
        .trim()
        .split('\n')
        .slice(-3)
        .map((line) => line.replace(/^\[\d+\] /, ''))
        .join('; ');
      reject(new Error(`git daemon exited (${code}): is port ${GIT_PORT} taken? (${why})`));
    });
  });
  return {
    // 9418 is git:// URLs' default port: the remote names none, as `sigil up`'s allowed prefixes
    // (git://127.0.0.1/, git://localhost/) do not; a remote on another port is not under them.
    remote: 'git://127.0.0.1/site.git',
    ready,
    /** The pushed page, read back from the bare repository. */
    pushedPage: () =>
      execFileSync('git', ['--git-dir', join(base, 'site.git'), 'show', 'main:index.html'], {
        encoding: 'utf8',
      }),
    stop: () => {
      daemon.removeAllListeners('close');
      daemon.kill();
      rmSync(base, { recursive: true, force: true });
    },
  };
}

let runId;

/** Prints one event of the run as it streams. */
function show(event, data) {
  if (event === 'run.started') runId = data.runId;
  const node = data.nodeId ? `${data.nodeId}`.padEnd(10) : ''.padEnd(10);
  if (event === 'node.status')
    console.log(`  ${node}${data.state}${data.error ? `: ${data.error.message}` : ''}`);
  else if (event === 'node.log') console.log(`  ${node}log  ${data.message}`);
  else if (event === 'node.output')
    console.log(`  ${node}out  ${JSON.stringify(data.outputs).slice(0, 120)}`);
  else if (event === 'cost') console.log(`  ${node}cost charged ${data.charged} base units (${data.kind})`);
  else if (event === 'approval.required')
    console.log(`  ${node}waits for your approval of ${JSON.stringify(data.value).slice(0, 80)}`);
  else if (event === 'node.artifact')
    console.log(
      `  ${node}artifact ${data.name} (${data.bytes} bytes) ${runtimeUrl}/canvas/runs/${runId}/artifacts/${data.id}`,
    );
  else if (event === 'run.ended') console.log(`run       ${data.status}, charged ${data.charged} base units`);
}

/** Streams a run's events until `until` holds for one (or the run ends); resolves to them. */
async function follow(response, until = () => false) {
  const events = [];
  for await (const { event, data } of serverSentEvents(response.body)) {
    // The runtime stopped before the run ended: the run is stored and goes on once it is back.
    if (event === 'shutdown')
      throw new Error(
        `the runtime stopped; run ${data.runId} goes on once it is back: GET /canvas/runs/${data.runId}/events with Last-Event-ID: ${data.lastEventId}`,
      );
    events.push({ event, data });
    show(event, data);
    if (event === 'run.ended' || until(event, data)) break;
  }
  return events;
}

async function main() {
  console.log(`runtime   ${runtimeUrl}, as the dev wallet ${account.address}`);
  const git = startGitDaemon();
  try {
    await git.ready;
    console.log(`git       ${git.remote} (git daemon, a bare repository)`);
    await signIn();
    await storeProviderKey();
    await deposit();
    const agent = await call('POST', '/agents', { name: 'first-canvas', model: 'sigil-echo' });
    workflow.nodes.find((n) => n.id === 'push').params.remote = git.remote;

    const response = await fetch(
      `${runtimeUrl}/canvas/workflows/execute/stream`,
      request('POST', { workflow, agentId: agent.id, inputs: { topic: TOPIC } }),
    );
    if (!response.ok)
      throw refusal('POST', '/canvas/workflows/execute/stream', response.status, await response.json());
    const first = await follow(
      response,
      (event, data) => event === 'run.status' && data.status === 'waiting_approval',
    );
    const approval = first.find((e) => e.event === 'approval.required').data;

    // A second request, as the owner would from another window: approve exactly the value shown.
    console.log(`approve   POST /canvas/runs/${runId}/nodes/approve/decision`);
    await call('POST', `/canvas/runs/${runId}/nodes/approve/decision`, {
      approved: true,
      valueHash: approval.valueHash,
    });
    const lastSeen = first.at(-1).data.seq;
    const rest = await fetch(`${runtimeUrl}/canvas/runs/${runId}/events`, {
      headers: { ...request('GET').headers, 'last-event-id': String(lastSeen) },
    });
    const events = [...first, ...(await follow(rest))];
    const ended = events.at(-1).data;
    if (ended.status !== 'succeeded')
      throw new Error(`the run ended ${ended.status}: ${JSON.stringify(ended.error ?? {})}`);
    if (!git.pushedPage().includes(TOPIC)) throw new Error('the pushed page does not hold the topic');
    console.log(`pushed    main:index.html in ${git.remote} holds "${TOPIC}"`);

    const { transactions } = await call('GET', '/wallet/transactions?kind=charge&limit=200');
    for (const cost of events.filter((e) => e.event === 'cost').map((e) => e.data)) {
      const entry = transactions.find((t) => t.id === cost.entryId);
      if (!entry || entry.amount !== cost.charged)
        throw new Error(
          `the ledger's charge of ${cost.nodeId} is ${entry?.amount ?? 'missing'}, its cost event said ${cost.charged}`,
        );
      console.log(
        `ledger    ${cost.nodeId}: charge ${entry.id} of ${entry.amount} base units, as its cost event said`,
      );
    }
  } finally {
    git.stop();
  }
}

try {
  await main();
} catch (error) {
  console.error(`first-canvas failed: ${error.message}`);
  process.exit(1);
}
