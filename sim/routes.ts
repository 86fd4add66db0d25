// The sim's routes, in one table: method, path and handler. Adding a route (a /metrics, say) is
// one line here; the 405 for a wrong method on a known path follows from the table.
import { uws, type HttpRequest, type HttpResponse, type TemplatedApp } from '../lib/uws.js';
import { cacheProbeRoute } from './cache-probe-route.js';
import type { SimContext } from './context.js';
import { generationRoute } from './generation-route.js';
import { familyOf } from './flavours/index.js';
import { healthRoute, modelsRoute, notFoundRoute, versionRoute } from './info-routes.js';
import { metricsRoute } from './metrics-route.js';
import { applyTemplateRoute, tokenizeRoute } from './tokenize-route.js';

type Handler = (res: HttpResponse, req: HttpRequest) => void;

interface Route {
  method: 'get' | 'post';
  path: string;
  handler: Handler;
}

function routes(ctx: SimContext): Route[] {
  const table: Route[] = [
    { method: 'post', path: '/v1/chat/completions', handler: generationRoute(ctx, 'chat') },
    { method: 'post', path: '/v1/responses', handler: generationRoute(ctx, 'responses') },
    { method: 'post', path: '/tokenize', handler: tokenizeRoute(ctx) },
    { method: 'get', path: '/v1/models', handler: modelsRoute(ctx) },
    { method: 'get', path: '/health', handler: healthRoute(ctx) },
    { method: 'get', path: '/version', handler: versionRoute },
    { method: 'get', path: '/metrics', handler: metricsRoute(ctx) },
    // Sim-only: what a benchmark's oracle router asks (sim/cache-probe-route.ts).
    { method: 'post', path: '/rc/cache-probe', handler: cacheProbeRoute(ctx) },
  ];
  // llama-server's template endpoint: the chat prompt its /tokenize then counts.
  if (familyOf(ctx.flavour.name) === 'llama.cpp') table.push({ method: 'post', path: '/apply-template', handler: applyTemplateRoute(ctx) });
  return table;
}

/** A uWS app serving the sim's routes. */
export function simApp(ctx: SimContext): TemplatedApp {
  const app = uws().App();
  const table = routes(ctx);
  for (const r of table) app[r.method](r.path, r.handler);
  app.any(
    '/*',
    notFoundRoute(
      table.map((r) => r.path),
      familyOf(ctx.flavour.name) === 'llama.cpp',
    ),
  );
  return app;
}
