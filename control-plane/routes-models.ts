// GET /api/models: the shared model catalog as the console shows it (names and capabilities,
// never upstream addresses) with the gateway's base URLs for the two client protocols, and each
// model's context window: the catalog's, else its backend's (model-contexts.ts).
import type { ApiDeps } from './deps.js';
import { route, type Route } from './router.js';
import { mergedCatalog } from './sources.js';

export function modelRoutes(deps: ApiDeps): Route[] {
  return [
    route({
      method: 'get',
      path: '/api/models',
      access: 'required',
      summary: 'The shared model catalog and the gateway base URLs (chat completions and messages protocol)',
      async handle() {
        const gateway = deps.gatewayUrl ?? null;
        const catalog = await mergedCatalog(deps.configuredModels, deps.store);
        const known = await deps.modelContexts.of(catalog);
        return {
          body: {
            models: catalog.map((m, i) => ({
              name: m.name,
              tools: m.tools,
              reasoning: m.reasoning,
              efforts: m.efforts,
              max_context: m.maxContext ?? null, // null: the backend's max_model_len applies
              // The window in use: the catalog's, else the backend's; null (source unknown) when neither says.
              context: known[i]!.context,
              context_source: known[i]!.source,
            })),
            openai_base_url: gateway && `${gateway}/v1`,
            anthropic_base_url: gateway && `${gateway}/api`,
          },
        };
      },
    }),
  ];
}
