import { z } from 'zod';
import { SIGIL_VERSION } from './health.ts';
import { publicBase } from '../../core/auth/settings.ts';

/**
 * Pieces of the services' OpenAPI 3.1 documents. Request shapes come from the zod schemas the routes
 * parse their input with, so a changed route input changes its document.
 */
type JsonSchema = Record<string, unknown> & { properties?: Record<string, unknown>; required?: string[] };

export const schemaOf = (schema: z.ZodType): JsonSchema => {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' });
  return rest as JsonSchema;
};

/** A JSON request body parsed by `schema`. */
export const jsonBody = (schema: z.ZodType, required = true) => ({
  required,
  content: { 'application/json': { schema: schemaOf(schema) } },
});

/** The path or query parameters an object schema parses, one parameter per key. */
export function parametersOf(schema: z.ZodType, where: 'path' | 'query'): Record<string, unknown>[] {
  const { properties = {}, required = [] } = schemaOf(schema);
  return Object.entries(properties).map(([name, property]) => ({
    name,
    in: where,
    required: where === 'path' || required.includes(name),
    schema: property,
  }));
}

export const json = (description: string, schema: Record<string, unknown> = { type: 'object' }) => ({
  description,
  content: { 'application/json': { schema } },
});

export const error = json('Error: { code, message, hint?, details? }', {
  $ref: '#/components/schemas/Error',
});

export const bearer = [{ bearer: [] }];
/** Routes that answer anyone, and more to a signed-in caller. */
export const optionalBearer = [{ bearer: [] }, {}];

export const health = {
  get: { summary: 'Health: status, version, database', responses: { '200': json('{ status, service, … }') } },
};
export const metrics = {
  get: {
    summary: 'Prometheus metrics of the HTTP edge',
    responses: { '200': { description: 'Prometheus text exposition format' } },
  },
};

/** Where a service is reached: its public URL, else its listen address (its config section; see publicBase). */
export interface ServiceAddress {
  publicUrl?: string | undefined;
  host: string;
  port: number;
}

/** An OpenAPI 3.1 document with the shared error shape and the bearer scheme. */
export function openApiDocument(options: {
  title: string;
  description: string;
  address: ServiceAddress;
  bearerDescription: string;
  schemas?: Record<string, unknown>;
  paths: Record<string, unknown>;
}): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: { title: options.title, version: SIGIL_VERSION, description: options.description },
    servers: [{ url: publicBase(options.address) }],
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: options.bearerDescription },
      },
      schemas: {
        Error: {
          type: 'object',
          required: ['code', 'message'],
          properties: {
            code: { type: 'string' },
            message: { type: 'string' },
            hint: { type: 'string' },
            details: { type: 'object' },
          },
        },
        ...options.schemas,
      },
    },
    paths: options.paths,
  };
}

/** `/agents/:id` as OpenAPI writes it: `/agents/{id}`. */
export const openApiPath = (koaPath: string): string => koaPath.replace(/[:*]([A-Za-z0-9_]+)/g, '{$1}');
