// The routes that tell about the server: GET /v1/models (vLLM's fields), /health, /version,
// and FastAPI's 404/405 for anything else.
import { statusLine } from '../lib/http.js';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import { hexId } from './generate.js';
import type { SimConfig } from './options.js';

type Handler = (res: HttpResponse, req: HttpRequest) => void;

/** GET /v1/models: the OpenAI list with the served model, with vLLM's fields; built once. */
export function modelsRoute(opts: Pick<SimConfig, 'model' | 'maxModelLen'>): Handler {
  const created = Math.floor(Date.now() / 1000);
  const body = JSON.stringify({
    object: 'list',
    data: [
      {
        id: opts.model,
        object: 'model',
        created,
        owned_by: 'vllm',
        root: opts.model,
        parent: null,
        max_model_len: opts.maxModelLen,
        permission: [
          {
            id: `modelperm-${hexId()}`,
            object: 'model_permission',
            created,
            allow_create_engine: false,
            allow_sampling: true,
            allow_logprobs: true,
            allow_search_indices: false,
            allow_view: true,
            allow_fine_tuning: false,
            organization: '*',
            group: null,
            is_blocking: false,
          },
        ],
      },
    ],
  });
  return (res) => {
    res.cork(() => {
      res.writeHeader('content-type', 'application/json');
      res.end(body);
    });
  };
}

/** GET /health: 200, empty body. */
export const healthRoute: Handler = (res) => {
  res.cork(() => res.end());
};

/** GET /version. */
export const versionRoute: Handler = (res) => {
  res.cork(() => {
    res.writeHeader('content-type', 'application/json');
    res.end('{"version":"rc-sim"}');
  });
};

/** Anything else: 405 for a wrong method on one of `knownPaths`, else 404, as FastAPI answers. */
export function notFoundRoute(knownPaths: readonly string[]): Handler {
  return (res, req) => {
    const known = knownPaths.includes(req.getUrl());
    res.cork(() => {
      res.writeStatus(statusLine(known ? 405 : 404));
      res.writeHeader('content-type', 'application/json');
      res.end(known ? '{"detail":"Method Not Allowed"}' : '{"detail":"Not Found"}');
    });
  };
}
