import { ensure, pass, sameAddress } from '@sigil/plugin-api/kit';
import { z } from 'zod';
import { formatUnits, specPriceUnits } from '../../x402.ts';
import { path } from '../catalog.ts';
import type { DeploymentContext, Requirement } from '../context.ts';
import { expectJson } from '../expect.ts';
import { sampleArguments } from '../mcp.ts';
import { serverAndTool } from '../tool-calls.ts';
import { expectPaymentRequired, restCall, type Json } from './messages.ts';
import { CONFIG, SPEC_CHAIN_ID, SPEC_NETWORK, SPEC_PRICE, SPEC_PRICE_USD } from './spec.ts';

/** The price the configuration states, and what a payment request asks, are the spec's. */

export const priceRequirement: Requirement = {
  id: 'GW-8.x402-price',
  level: 'MUST',
  title:
    'GET /api/payments/config states 0.0005 USD per call (500 base units at 6 decimals) on eip155:8453, and PAYMENT-REQUIRED asks exactly that',
  spec: SPEC_PRICE,
  service: 'gateway',
  check: async (context) => {
    const config = await readConfig(context);
    context.evidence.note(`GET ${CONFIG}`, config.body);
    ensure(
      config.body.enabled !== false,
      `GET ${CONFIG} says payments are off: the gateway spec charges ${SPEC_PRICE_USD} USD per tool call`,
    );
    ensure(
      config.network !== undefined || config.chainId !== undefined,
      `GET ${CONFIG} names no network nor chainId`,
    );
    ensure(
      config.network === undefined || config.network === SPEC_NETWORK,
      `GET ${CONFIG} says network ${config.network}, not ${SPEC_NETWORK}`,
    );
    ensure(
      config.chainId === undefined || config.chainId === SPEC_CHAIN_ID,
      `GET ${CONFIG} says chainId ${config.chainId}, not ${SPEC_CHAIN_ID}`,
    );
    ensure(
      config.units !== undefined && config.decimals !== undefined,
      `GET ${CONFIG} states no price in base units (pricePerCall) with the token's decimals (token.decimals)`,
    );
    const expected = specPriceUnits(config.decimals);
    const stated = formatUnits(config.units, config.decimals);
    ensure(
      expected !== undefined && config.units === expected,
      `GET ${CONFIG} states ${config.units} base units at ${config.decimals} decimals = ${stated} USD; the spec's price is ${SPEC_PRICE_USD} USD${expected === undefined ? '' : ` (${expected} base units)`}`,
    );
    ensure(
      config.usd === undefined || sameDecimal(config.usd, SPEC_PRICE_USD),
      `GET ${CONFIG} states the price as ${config.usd} USD, not ${SPEC_PRICE_USD}`,
    );
    if (config.asset !== undefined && context.payer?.canReadChain) {
      const onChain = await context.payer.decimals(config.asset);
      ensure(
        onChain === undefined || onChain === config.decimals,
        `GET ${CONFIG} says the token has ${config.decimals} decimals; the chain of --rpc-url says ${onChain}`,
      );
    }
    const { server, tool } = await serverAndTool(context);
    const what = `POST ${path.tool(server.view.id, tool.name)}`;
    const required = expectPaymentRequired(
      await context.http.request(restCall(server.view.id, tool, sampleArguments(tool.inputSchema))),
      what,
    );
    const entry = required.accepts.find((candidate) => candidate.network === SPEC_NETWORK);
    ensure(
      entry,
      `${what}: PAYMENT-REQUIRED accepts nothing on ${SPEC_NETWORK} (${required.accepts.map((e) => e.network).join(', ')})`,
    );
    const wrong = [
      entry.amount === config.units.toString() ? '' : `amount ${entry.amount} (config: ${config.units})`,
      config.asset === undefined || sameAddress(entry.asset, config.asset)
        ? ''
        : `asset ${entry.asset} (config: ${config.asset})`,
      config.payTo === undefined || sameAddress(entry.payTo, config.payTo)
        ? ''
        : `payTo ${entry.payTo} (config: ${config.payTo})`,
    ].filter((problem) => problem !== '');
    ensure(wrong.length === 0, `${what}: PAYMENT-REQUIRED disagrees with GET ${CONFIG}: ${wrong.join(', ')}`);
    return pass();
  },
};

interface ReadConfig {
  body: Json;
  network: string | undefined;
  chainId: number | undefined;
  units: bigint | undefined;
  decimals: number | undefined;
  usd: string | undefined;
  asset: string | undefined;
  payTo: string | undefined;
}

const objectAt = (value: unknown): Json | undefined =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;

/** GET /api/payments/config, read leniently: the spec names the endpoint, not its body. */
async function readConfig(context: DeploymentContext): Promise<ReadConfig> {
  const body = expectJson(
    await context.http.request({ service: 'gateway', path: CONFIG }),
    200,
    z.record(z.string(), z.unknown()),
    `GET ${CONFIG}`,
  );
  const token = objectAt(body.token) ?? objectAt(body.asset) ?? {};
  const price = objectAt(body.price);
  const unitsValue = body.pricePerCall ?? price?.amount ?? body.amount;
  const decimals = token.decimals ?? body.decimals;
  const usd = body.priceUsd ?? body.priceUSD ?? (typeof body.price === 'string' ? body.price : undefined);
  const asset = token.address ?? (typeof body.asset === 'string' ? body.asset : undefined);
  return {
    body,
    network: typeof body.network === 'string' ? body.network : undefined,
    chainId: typeof body.chainId === 'number' ? body.chainId : undefined,
    units:
      (typeof unitsValue === 'string' && /^\d+$/.test(unitsValue)) ||
      (typeof unitsValue === 'number' && Number.isInteger(unitsValue))
        ? BigInt(unitsValue)
        : undefined,
    decimals: typeof decimals === 'number' && Number.isInteger(decimals) ? decimals : undefined,
    usd: typeof usd === 'string' || typeof usd === 'number' ? String(usd) : undefined,
    asset: typeof asset === 'string' ? asset : undefined,
    payTo: typeof body.payTo === 'string' ? body.payTo : undefined,
  };
}

/** "0.00050" and "0.0005" are the same price. */
const sameDecimal = (a: string, b: string): boolean => {
  const norm = (text: string) =>
    text
      .trim()
      .replace(/^\$/, '')
      .replace(/(\.\d*?)0+$/, '$1')
      .replace(/\.$/, '');
  return norm(a) === norm(b);
};
