/**
 * `npm run bench`: each scenario is measured against a baseline in the same run, since absolute
 * numbers on these machines are noisy. Writes bench/results/<suite>.json and the table in bench/README.md.
 */
import { execFile, spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import Router from '@koa/router';
import { createHttpApp } from '../core/http/app.ts';
import { listen } from '../core/http/server.ts';
import { serve } from '../services/serve.ts';
import { openTestKernel, quietLogger } from '../test/support/kernel.ts';

const here = dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);
/** The edge of a service on 127.0.0.1 at a port the OS picks, allowing no other name or origin. */
const LOOPBACK_EDGE = { host: '127.0.0.1', port: 0, http: { allowedHosts: [], allowedOrigins: [] } };
const TOTAL = Number(process.env.BENCH_REQUESTS ?? 4000);

interface Measurement {
  scenario: string;
  concurrency: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerRequest: number;
}

async function measure(scenario: string, url: string, concurrency: number): Promise<Measurement> {
  const cpuBefore = process.cpuUsage();
  const { stdout } = await run(process.execPath, [
    '--import',
    'tsx',
    join(here, 'load.ts'),
    url,
    String(TOTAL),
    String(concurrency),
    '500',
  ]);
  const cpu = process.cpuUsage(cpuBefore);
  const result = JSON.parse(stdout) as { requests: number; rps: number; p50: number; p99: number };
  const measurement = {
    scenario,
    concurrency,
    rps: Math.round(result.rps),
    p50Ms: Number(result.p50.toFixed(3)),
    p99Ms: Number(result.p99.toFixed(3)),
    // The servers live in this process and the load generator in its own, so this process's CPU is the server's.
    serverCpuUsPerRequest: Math.round((cpu.user + cpu.system) / (result.requests + 500)),
  };
  process.stdout.write(`${JSON.stringify(measurement)}\n`);
  return measurement;
}

async function httpCoreSuite(): Promise<Measurement[]> {
  const bare = createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end('{"ok":true}');
  });
  await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
  const bareAddress = bare.address();
  const bareUrl = `http://127.0.0.1:${typeof bareAddress === 'object' && bareAddress ? bareAddress.port : 0}/`;
  const core = await listen(
    createHttpApp({
      service: 'bench',
      logger: quietLogger(),
      bodyLimitBytes: 1024,
      edge: LOOPBACK_EDGE,
      routers: [new Router().get('/ok', (ctx) => void (ctx.body = { ok: true }))],
    }).app,
    '127.0.0.1',
    0,
  );
  const kernel = await openTestKernel();
  const serving = await serve(
    { ...kernel, config: { ...kernel.config, gateway: { ...kernel.config.gateway, port: 0 } } },
    ['gateway'],
  );
  const results: Measurement[] = [];
  try {
    for (const concurrency of [1, 50]) {
      results.push(await measure('baseline: bare node:http JSON', bareUrl, concurrency));
      results.push(
        await measure('core: Koa app with the full middleware chain', `${core.url}/ok`, concurrency),
      );
      results.push(
        await measure(
          'gateway: GET /health (SQLite round trip)',
          `${serving.urls.gateway}/health`,
          concurrency,
        ),
      );
    }
  } finally {
    bare.close();
    await core.close(0);
    await serving.stop();
  }
  return results;
}

/** A suite's row: suites whose servers' CPU cannot be told apart (a container's engine's) leave it out. */
type Row = Omit<Measurement, 'serverCpuUsPerRequest'> & {
  serverCpuUsPerRequest?: number;
  mcpServerCpuUsPerCall?: number;
};

const suites: Record<string, () => Promise<Row[]>> = {
  'http-core': httpCoreSuite,
  'sandbox-cold-start': async () => (await import('./sandbox.ts')).sandboxColdStartSuite(),
  'gateway-mcp': async () => (await import('./gateway.ts')).gatewayMcpSuite(),
  'mcp-downstream': async () => (await import('./mcp-downstream.ts')).mcpDownstreamSuite(),
  payments: async () => (await import('./payments.ts')).paymentsSuite(),
  ledger: async () => (await import('./ledger.ts')).ledgerSuite(),
  chat: async () => (await import('./chat.ts')).chatSuite(),
  'registry-kinds': async () => (await import('./registry-kinds.ts')).registryKindsSuite(),
  attestation: async () => (await import('./attestation.ts')).attestationSuite(),
  canvas: async () => (await import('./canvas.ts')).canvasSuite(),
  reflect: async () => (await import('./reflect.ts')).reflectSuite(),
  compiled: async () => (await import('./compiled.ts')).compiledSuite(),
  'scale-out': async () => (await import('./scaleout.ts')).scaleOutSuite(),
};
// `npm run bench -- gateway-mcp` runs the named suites only; the table keeps the others' last results.
// Each suite runs in a process of its own: one suite's servers, timers and heap never slow the next.
const resultsDir = join(here, 'results');
mkdirSync(resultsDir, { recursive: true });
if (process.argv[2] === '--suite') {
  const name = process.argv[3] ?? '';
  const suite = suites[name];
  if (!suite) throw new Error(`No bench suite "${name}"`);
  const measurements = await suite();
  writeFileSync(
    join(resultsDir, `${name}.json`),
    `${JSON.stringify({ suite: name, date: new Date().toISOString(), node: process.version, requestsPerScenario: TOTAL, measurements }, null, 2)}\n`,
  );
  process.exit(0);
}
const selected = process.argv.slice(2);
for (const name of selected) if (!(name in suites)) throw new Error(`No bench suite "${name}"`);
for (const name of Object.keys(suites)) {
  if (selected.length > 0 && !selected.includes(name)) continue;
  const run = spawnSync(
    process.execPath,
    [...process.execArgv, fileURLToPath(import.meta.url), '--suite', name],
    {
      stdio: 'inherit',
    },
  );
  if (run.status !== 0) {
    process.stderr.write(`bench suite ${name} failed (${run.status ?? run.signal})\n`);
    process.exit(1);
  }
}
const table: string[] = [
  '| suite | scenario | in flight | req/s | p50 ms | p99 ms | server CPU µs/req | MCP server CPU µs/call |',
  '|---|---|---:|---:|---:|---:|---:|---:|',
];
for (const name of Object.keys(suites)) {
  const file = join(resultsDir, `${name}.json`);
  if (!existsSync(file)) continue;
  const { measurements } = JSON.parse(readFileSync(file, 'utf8')) as {
    measurements: Row[];
  };
  for (const m of measurements)
    table.push(
      `| ${name} | ${m.scenario} | ${m.concurrency} | ${m.rps} | ${m.p50Ms} | ${m.p99Ms} | ${m.serverCpuUsPerRequest ?? ''} | ${m.mcpServerCpuUsPerCall ?? ''} |`,
    );
}
// Everything from this marker on in bench/README.md is kept: notes and before/after comparisons.
const NOTES_MARKER = '<!-- notes: kept by npm run bench -->';
const readme = join(here, 'README.md');
const previous = existsSync(readme) ? readFileSync(readme, 'utf8') : '';
const notes = previous.includes(NOTES_MARKER) ? previous.slice(previous.indexOf(NOTES_MARKER)) : '';
writeFileSync(
  readme,
  `# Benchmarks\n\n\`npm run bench\` measures each scenario against a baseline in the same run (2 vCPU machines are noisy:\ncompare rows, not absolute numbers); \`npm run bench -- <suite>…\` runs some suites and keeps the others' last\nresults; each suite runs in a process of its own. The load generators (\`bench/load.ts\`, \`bench/mcp-load.ts\`) are separate processes with keep-alive\nnode:http connections; server CPU per request is the serving process's CPU time divided by requests. Raw\nresults: \`bench/results/*.json\`.\n\n${table.join('\n')}\n${notes === '' ? '' : `\n${notes}`}`,
);
process.exit(0);
