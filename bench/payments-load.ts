/**
 * Load generator for paid REST tool calls (`POST /api/servers/:id/tools/:name`), run as its own
 * process so its CPU never counts as the gateway's. One JSON argument (PaymentsLoadOptions) says what
 * to call; keep-alive `node:http` connections, as bench/mcp-load.ts.
 *
 * Every paid call needs its own x402 payment (a fresh EIP-3009 nonce). Signing one costs ~2 ms of
 * client CPU, which on a 2 vCPU machine would be taken from the gateway under test, so payments are
 * signed before the timed window, in worker threads: the PaymentRequired comes from one unpaid call
 * (402 + PAYMENT-REQUIRED), then `x402Client` + `ExactEvmScheme` sign `presign` payloads. With a
 * duration (`seconds`), the warmup measures the rate and the pool is topped up to 1.3 × that rate ×
 * the duration before the clock starts; should it still run dry, the rest are signed just in time
 * (counted in `signing.justInTime`, so a run that did is visible).
 *
 * Answers: a 200 must hold `expect` and no `"isError":true`, and a paid one a PAYMENT-RESPONSE. Other
 * statuses are counted, not fatal: the caller checks what they charged. Prints PaymentsLoadResult.
 */
import { availableParallelism } from 'node:os';
import { Agent, request } from 'node:http';
import { Worker } from 'node:worker_threads';
import { x402Client } from '@x402/core/client';
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentSignatureHeader,
} from '@x402/core/http';
import type { PaymentRequired } from '@x402/core/types';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import type { Address, Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';

export interface PaymentsLoadOptions {
  url: string;
  /** JSON body of each call. */
  body: string;
  expect: string;
  concurrency: number;
  /** Unmeasured calls first. */
  warmup: number;
  /** Measured calls, or… */
  total?: number;
  /** …calls for this many seconds (every call started before the deadline is counted). */
  seconds?: number;
  /**
   * With counts: no call is started once a phase (warmup, measured) has run this long, so a run whose
   * calls are pathologically slow still ends; `capped` then says so.
   */
  capSeconds?: number;
  /** Pay every call, as this payer, in this asset. */
  payment?: {
    payerKey: Hex;
    network: `${string}:${string}`;
    asset: Address;
    /** Payloads signed before the warmup (with `total`, at least warmup + total are). */
    presign?: number;
  };
}

export interface PaymentsLoadResult {
  /** Measured calls answered 200 (the latencies are theirs; with a duration, those started in it). */
  requests: number;
  /** Every call made, warmup and failures included: what the serving CPU is divided by. */
  calls: number;
  /** The measured window: `seconds`, or the time the `total` calls took. */
  seconds: number;
  /** With a duration: how long the calls in flight at its end took to finish. */
  drainSeconds: number;
  /** Calls answered 200 within the window, per second. */
  rps: number;
  p50: number;
  p99: number;
  /** Measured calls that took over a second. */
  overOneSecond: number;
  /** A phase stopped at `capSeconds` before its count. */
  capped: boolean;
  /** The measured window, epoch milliseconds (the gateway's clock is this machine's). */
  startedAt: number;
  endedAt: number;
  /** Answers other than a good 200, by status ("network" for a failed connection), all phases. */
  errors: Record<string, number>;
  firstError?: string;
  signing?: {
    presigned: number;
    /** Wall time of the pre-signing, in ms, and its worker threads. */
    presignMs: number;
    threads: number;
    /** Calls whose payment had to be signed inside the timed window. */
    justInTime: number;
  };
  /** EIP-3009 nonces of paid calls, all phases: answered 200, and answered otherwise. */
  paid?: { ok: string[]; refused: string[]; pending: number };
}

interface Signed {
  header: string;
  nonce: string;
}

/** The signing worker: plain JavaScript (workers do not inherit tsx), importing by resolved URLs. */
const SIGNER = `
const { parentPort, workerData } = require('node:worker_threads');
(async () => {
  const [{ x402Client }, { ExactEvmScheme }, { privateKeyToAccount }, { encodePaymentSignatureHeader }] =
    await Promise.all(workerData.modules.map((url) => import(url)));
  const { payerKey, network, asset, required, count } = workerData;
  const client = new x402Client()
    .register(network, new ExactEvmScheme(privateKeyToAccount(payerKey)))
    .setSpendControls({ allowedAssets: [{ network, asset }] });
  const signed = [];
  for (let i = 0; i < count; i++) {
    const payload = await client.createPaymentPayload(required);
    signed.push({ header: encodePaymentSignatureHeader(payload), nonce: payload.payload.authorization.nonce });
  }
  parentPort.postMessage(signed);
})().catch((err) => parentPort.postMessage({ error: String(err && err.stack || err) }));
`;
const SIGNER_MODULES = [
  '@x402/core/client',
  '@x402/evm/exact/client',
  'viem/accounts',
  '@x402/core/http',
].map((specifier) => import.meta.resolve(specifier));

async function sign(
  payment: NonNullable<PaymentsLoadOptions['payment']>,
  required: PaymentRequired,
  count: number,
  threads: number,
): Promise<Signed[]> {
  if (count <= 0) return [];
  const shares = Array.from(
    { length: threads },
    (_, i) => Math.floor(count / threads) + (i < count % threads ? 1 : 0),
  ).filter((share) => share > 0);
  const batches = await Promise.all(
    shares.map(
      (share) =>
        new Promise<Signed[]>((resolve, reject) => {
          const worker = new Worker(SIGNER, {
            eval: true,
            workerData: { ...payment, required, count: share, modules: SIGNER_MODULES },
          });
          worker.once('message', (message: Signed[] | { error: string }) => {
            void worker.terminate();
            if (Array.isArray(message)) resolve(message);
            else reject(new Error(`signing failed: ${message.error}`));
          });
          worker.once('error', reject);
        }),
    ),
  );
  return batches.flat();
}

/** The payment terms, from one unpaid call. */
function paymentRequired(url: string, body: Buffer): Promise<PaymentRequired> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': body.length } },
      (res) => {
        res.resume();
        res.on('end', () => {
          const header = res.headers['payment-required'];
          if (res.statusCode === 402 && typeof header === 'string')
            resolve(decodePaymentRequiredHeader(header));
          else reject(new Error(`an unpaid call answered ${res.statusCode}, without PAYMENT-REQUIRED`));
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const options = JSON.parse(process.argv[2] ?? '{}') as PaymentsLoadOptions;
const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency });
const body = Buffer.from(options.body);
const baseHeaders = { 'content-type': 'application/json', 'content-length': body.length };
const errors: Record<string, number> = {};
let firstError: string | undefined;
const ok: string[] = [];
const refused: string[] = [];
let pending = 0;

const threads = Math.max(1, availableParallelism());
let required: PaymentRequired | undefined;
let pool: Signed[] = [];
let presigned = 0;
let presignMs = 0;
let justInTime = 0;
let timing = false;
const topUp = async (count: number) => {
  if (!options.payment || !required) return;
  const started = performance.now();
  pool = pool.concat(await sign(options.payment, required, count, threads));
  presignMs += performance.now() - started;
  presigned += count;
};
if (options.payment) {
  required = await paymentRequired(options.url, body);
  await topUp(
    Math.max(options.payment.presign ?? 0, options.total === undefined ? 0 : options.warmup + options.total),
  );
}

let signer: x402Client | undefined;
/** The next payment: pre-signed, or (pool empty) signed now, in this thread. */
async function nextPayment(): Promise<Signed | undefined> {
  const { payment } = options;
  if (!payment || !required) return undefined;
  const ready = pool.pop();
  if (ready) return ready;
  if (timing) justInTime += 1;
  signer ??= new x402Client()
    .register(payment.network, new ExactEvmScheme(privateKeyToAccount(payment.payerKey)))
    .setSpendControls({ allowedAssets: [{ network: payment.network, asset: payment.asset }] });
  const payload = await signer.createPaymentPayload(required);
  const { nonce } = payload.payload.authorization as { nonce: string };
  return { header: encodePaymentSignatureHeader(payload), nonce };
}

/** One call; true when it was answered with a good 200. */
async function call(): Promise<boolean> {
  const payment = await nextPayment();
  const headers = payment ? { ...baseHeaders, 'payment-signature': payment.header } : baseHeaders;
  return new Promise((resolve) => {
    const failed = (status: string, detail: string) => {
      errors[status] = (errors[status] ?? 0) + 1;
      firstError ??= `${status}: ${detail.slice(0, 500)}`;
      if (payment) refused.push(payment.nonce);
      resolve(false);
    };
    const req = request(options.url, { method: 'POST', agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200 || !text.includes(options.expect) || text.includes('"isError":true')) {
          failed(String(res.statusCode), text);
          return;
        }
        if (payment) {
          const receipt = res.headers['payment-response'];
          if (typeof receipt !== 'string') {
            failed('200 without PAYMENT-RESPONSE', text);
            return;
          }
          const decoded = decodePaymentResponseHeader(receipt);
          if (!decoded.success) pending += 1;
          ok.push(payment.nonce);
        }
        resolve(true);
      });
    });
    req.on('error', (err) => failed('network', err.message));
    req.end(body);
  });
}

let calls = 0;
let capped = false;
/** Latencies of the calls answered 200, and when each ended (performance.now()). */
async function run(until: { count: number } | { deadline: number }): Promise<{ ms: number; end: number }[]> {
  const answered: { ms: number; end: number }[] = [];
  let started = 0;
  const cap = performance.now() + (options.capSeconds ?? Infinity) * 1000;
  const more = () => {
    if (!('count' in until)) return performance.now() < until.deadline;
    if (started >= until.count) return false;
    if (performance.now() < cap) return true;
    capped = true;
    return false;
  };
  const worker = async () => {
    while (more()) {
      started += 1;
      calls += 1;
      const begin = performance.now();
      if (await call()) {
        const end = performance.now();
        answered.push({ ms: end - begin, end });
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  return answered;
}

const warmupStarted = performance.now();
await run({ count: options.warmup });
const warmupRate = calls / ((performance.now() - warmupStarted) / 1000);
if (options.payment && options.seconds !== undefined) {
  // Enough for the window at 1.3 × the warmup's rate, plus the calls in flight at its end; anything
  // beyond is signed just in time.
  await topUp(Math.ceil(warmupRate * options.seconds * 1.3) + 2 * options.concurrency - pool.length);
}
timing = true;
const startedAt = Date.now();
const started = performance.now();
const answered = await run(
  options.seconds === undefined
    ? { count: options.total ?? 0 }
    : { deadline: started + options.seconds * 1000 },
);
const finished = performance.now();
agent.destroy();
// With a duration, the rate counts the calls answered within it: the calls still in flight at the
// deadline are waited for (their latencies count) but not the time they take to drain.
const seconds = options.seconds ?? (finished - started) / 1000;
const inWindow =
  options.seconds === undefined
    ? answered.length
    : answered.filter((a) => a.end <= started + seconds * 1000).length;
const latencies = answered.map((a) => a.ms).sort((a, b) => a - b);
const pick = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
const result: PaymentsLoadResult = {
  requests: latencies.length,
  calls,
  seconds,
  drainSeconds: (finished - started) / 1000 - seconds,
  rps: inWindow / seconds,
  p50: pick(0.5),
  p99: pick(0.99),
  overOneSecond: latencies.filter((latency) => latency > 1000).length,
  capped,
  startedAt,
  endedAt: startedAt + Math.round(seconds * 1000),
  errors,
  ...(firstError === undefined ? {} : { firstError }),
  ...(options.payment
    ? {
        signing: { presigned, presignMs: Math.round(presignMs), threads, justInTime },
        paid: { ok, refused, pending },
      }
    : {}),
};
// Exit once the result is out: a pipe takes 64 KB at a time, and exit() would cut a longer one short.
process.stdout.write(JSON.stringify(result), () => process.exit(0));
