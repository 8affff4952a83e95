import { z } from 'zod';
import { asBool, asString, type EnvOverrides } from '../../core/config/env.ts';
import { serviceEnv, serviceSchema } from '../../core/config/service.ts';
import { privateKey } from '../../core/config/values.ts';
import { canvasSchema } from './canvas/config.ts';
import { asDataKeys, chatSchema, historySchema } from './chat/config.ts';
import { selfImprovementSchema } from './reflect/config.ts';

/** The `runtime` section: where the agent runtime listens, its keys, its chat sessions. */
export const runtimeSchema = serviceSchema(8080)
  .extend({
    mcpSigningKey: z
      .string()
      .optional()
      .describe(
        "ES256 private key (PKCS#8 PEM or JWK JSON) signing delegated gateway JWTs, over the TEE's sealed one (tee-vtpm); unset: the sealed key, else ephemeral in development, refused in production and where replicas share the database",
      ),
    mcpSigningKeyPrevious: z
      .string()
      .optional()
      .describe(
        'The ES256 key MCP_SIGNING_KEY replaced (PEM or JWK, private or public): still published in the JWKS during a rotation, never used to sign',
      ),
    delegatedJwtTtlSeconds: z
      .number()
      .int()
      .min(30)
      .max(900)
      .default(300)
      .describe('Lifetime of a delegated gateway JWT'),
    operatorKey: privateKey
      .optional()
      .describe(
        "Private key of the runtime's operator wallet, which signs its gateway requests with ERC-8128",
      ),
    providerApiKey: z
      .string()
      .optional()
      .describe(
        "The operator's internal provider key, used for a chat when the wallet stored none and chat.internalKey allows it",
      ),
    chat: chatSchema.describe('Chat sessions and their limits (docs/runtime-chat.md)'),
    canvas: canvasSchema.describe('Canvas workflows, their runs and limits (docs/canvas.md)'),
    history: historySchema.describe('Chat history at rest: its encryption keys (docs/runtime-chat.md)'),
    selfImprovement: selfImprovementSchema.describe(
      'Self-improvement runs: their schedules, leases and retries (docs/self-improvement.md)',
    ),
  })
  .prefault({});

/** The runtime's session setting in the shared `auth` section. */
export const RUNTIME_SESSION = {
  runtimeJwtTtlSeconds: z
    .number()
    .int()
    .min(60)
    .max(86_400)
    .default(3600)
    .describe('Lifetime of a runtime session JWT (1 h)'),
};

/** The environment variables of the runtime's settings, and the config path each sets. */
export const RUNTIME_ENV: EnvOverrides = {
  ...serviceEnv('RUNTIME', 'runtime'),
  MCP_SIGNING_KEY: { path: 'runtime.mcpSigningKey', coerce: asString },
  MCP_SIGNING_KEY_PREVIOUS: { path: 'runtime.mcpSigningKeyPrevious', coerce: asString },
  RUNTIME_OPERATOR_KEY: { path: 'runtime.operatorKey', coerce: asString },
  PROVIDER_API_KEY: { path: 'runtime.providerApiKey', coerce: asString },
  RUNTIME_CHAT_INTERNAL_KEY: { path: 'runtime.chat.internalKey', coerce: asBool },
  RUNTIME_GATEWAY_PATH: { path: 'runtime.chat.gatewayPath', coerce: asString },
  RUNTIME_GATEWAY_URL: { path: 'runtime.chat.gatewayUrl', coerce: asString },
  RUNTIME_CANVAS_TEAM_MODE: { path: 'runtime.canvas.teamMode', coerce: asBool },
  RUNTIME_CANVAS_DATA_DIR: { path: 'runtime.canvas.dataDir', coerce: asString },
  RUNTIME_DATA_KEY: { path: 'runtime.history.dataKeys', coerce: asDataKeys },
};

/** The runtime's config paths whose values are secrets. */
export const RUNTIME_SECRET_PATHS = [
  'runtime.mcpSigningKey',
  'runtime.mcpSigningKeyPrevious',
  'runtime.operatorKey',
  'runtime.providerApiKey',
  'runtime.history.dataKeys',
] as const;
