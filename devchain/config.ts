import { z } from 'zod';
import { asBool, asInt, asString, type EnvOverrides } from '../core/config/env.ts';
import { port } from '../core/config/values.ts';

/** The `devChain` section: the local chain `sigil up` runs for payments. */
export const devChainSchema = z
  .object({
    enabled: z
      .boolean()
      .default(true)
      .describe(
        'sigil up starts a local anvil chain with the dev dollar token and adds a payment rail on it, unless plugins lists a payment-rail',
      ),
    port: port.optional().describe('RPC port of the dev chain on 127.0.0.1; picked by the OS when unset'),
    stateFile: z
      .string()
      .min(1)
      .default('data/devchain/state.json')
      .describe(
        "Where the dev chain's state (blocks, balances, contracts) is kept between runs; delete it for a new chain",
      ),
  })
  .strict()
  .prefault({})
  .describe('The local dev chain of sigil up (never sigil gateway or sigil runtime alone)');

/** The environment variables of the dev chain's settings, and the config path each sets. */
export const DEV_CHAIN_ENV: EnvOverrides = {
  DEV_CHAIN: { path: 'devChain.enabled', coerce: asBool },
  DEV_CHAIN_PORT: { path: 'devChain.port', coerce: asInt },
  DEV_CHAIN_STATE_FILE: { path: 'devChain.stateFile', coerce: asString },
};
