// GET /api/openapi.json: an OpenAPI 3.1 document of the platform API, generated from the route
// table itself (router.ts): paths, methods, credentials, and the request body and query schemas
// are the zod schemas the router validates with (z.toJSONSchema, input side). So the document
// cannot list a route that is not served, nor miss one that is (test/control-plane/openapi.test.ts
// checks both against the running server and the sources).
import { z } from 'zod';
import { route, type Access, type Method, type Route } from './router.js';

type JsonSchema = Record<string, unknown>;

const HTTP_METHOD: Record<Method, string> = { get: 'get', post: 'post', put: 'put', del: 'delete' };

/** The input-side JSON Schema of a zod schema (transforms document their input). */
function jsonSchema(schema: z.ZodType): JsonSchema {
  const { $schema: _drop, ...rest } = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
  return rest;
}

/** `/api/profile/templates/:id` -> `/api/profile/templates/{id}` and its parameter names. */
export function openApiPath(path: string): { path: string; params: string[] } {
  const params: string[] = [];
  const out = path.replace(/:([A-Za-z0-9_]+)/g, (_m, name: string) => {
    params.push(name);
    return `{${name}}`;
  });
  return { path: out, params };
}

const SECURITY: Record<Access, Record<string, string[]>[]> = {
  none: [],
  // A credential is optional: none, or either kind.
  optional: [{}, { bearer: [] }, { session: [] }],
  required: [{ bearer: [] }, { session: [] }],
  admin: [{ adminToken: [] }],
  internal: [{ internalToken: [] }],
  // An operator account's browser session (keys are refused).
  operator: [{ session: [] }],
};

const errorBody = {
  description: 'Error: `{ detail }` (a string; an object with `code`, `message` and `redirect` for 403 account_not_verified)',
  content: { 'application/json': { schema: { type: 'object', properties: { detail: {} }, required: ['detail'] } } },
};

function operation(r: Route): JsonSchema {
  const { params } = openApiPath(r.path);
  const parameters: JsonSchema[] = params.map((name) => ({ name, in: 'path', required: true, schema: { type: 'string' } }));
  if (r.query) {
    const q = jsonSchema(r.query) as { properties?: Record<string, JsonSchema>; required?: string[] };
    for (const [name, schema] of Object.entries(q.properties ?? {})) {
      parameters.push({ name, in: 'query', required: q.required?.includes(name) ?? false, schema });
    }
  }
  const op: JsonSchema = {
    operationId: `${HTTP_METHOD[r.method]}${r.path.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ?? '').toUpperCase())}`,
    summary: r.summary ?? `${HTTP_METHOD[r.method].toUpperCase()} ${r.path}`,
    tags: [r.path.split('/')[2] ?? 'api'],
    security: SECURITY[r.access],
    responses: {
      200: r.stream
        ? { description: 'Server-sent events', content: { 'text/event-stream': { schema: { type: 'string' } } } }
        : { description: 'Success', content: { 'application/json': { schema: {} } } },
      default: errorBody,
    },
  };
  if (parameters.length) op.parameters = parameters;
  if (r.body) op.requestBody = { required: !r.optionalBody, content: { 'application/json': { schema: jsonSchema(r.body) } } };
  return op;
}

/** The document for `routes`. */
export function openApiDocument(routes: readonly Route[]): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const r of routes) {
    const { path } = openApiPath(r.path);
    (paths[path] ??= {})[HTTP_METHOD[r.method]] = operation(r);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'rc platform API',
      version: '0.1.0',
      description:
        'Accounts, credits, templates and instances. Bodies are JSON objects; errors are `{ detail }`. ' +
        "Writes made with the session cookie need the session's CSRF token in `x-csrf-token` (from sign-in or GET /api/auth/session).",
    },
    paths,
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'An API key `rc-...` (GET /api/me `api_token`)' },
        session: {
          type: 'apiKey',
          in: 'cookie',
          name: 'rc_session',
          description: 'Browser session from POST /api/auth/login or /signup (__Host-rc_session behind TLS; a request carrying it twice has none)',
        },
        adminToken: { type: 'apiKey', in: 'header', name: 'x-rc-admin-token', description: 'Operator token from the data dir (the rc CLI)' },
        internalToken: {
          type: 'apiKey',
          in: 'header',
          name: 'x-rc-internal-token',
          description: 'Internal token of the gateways learning from the control plane (internal API)',
        },
      },
    },
  };
}

/** GET /api/openapi.json over `routes` (the array may still grow: the document is built on first request). */
export function openApiRoute(routes: readonly Route[]): Route {
  let json: unknown;
  return route({
    method: 'get',
    path: '/api/openapi.json',
    access: 'none',
    summary: 'This document (OpenAPI 3.1)',
    handle: () => ({ body: (json ??= openApiDocument(routes)) }),
  });
}
