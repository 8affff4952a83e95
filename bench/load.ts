/**
 * Load generator, run as its own process so its CPU never counts as the server's: keeps `concurrency`
 * requests in flight over keep-alive node:http connections (fetch costs several times the server's
 * CPU per request here) and prints latency percentiles and throughput as JSON.
 */
import { Agent, request } from 'node:http';

const [url = '', total = '2000', concurrency = '1', warmup = '500'] = process.argv.slice(2);
const agent = new Agent({ keepAlive: true, maxSockets: Number(concurrency) });

function once(): Promise<number> {
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const req = request(url, { agent }, (res) => {
      res.resume();
      res.on('end', () =>
        res.statusCode === 200
          ? resolve(Number(process.hrtime.bigint() - started) / 1e6)
          : reject(new Error(`status ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

async function run(count: number): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next += 1;
      latencies.push(await once());
    }
  };
  await Promise.all(Array.from({ length: Number(concurrency) }, worker));
  return latencies;
}

await run(Number(warmup));
const started = process.hrtime.bigint();
const latencies = (await run(Number(total))).sort((a, b) => a - b);
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const pick = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
process.stdout.write(
  JSON.stringify({
    requests: latencies.length,
    seconds,
    rps: latencies.length / seconds,
    p50: pick(0.5),
    p99: pick(0.99),
  }),
);
agent.destroy();
