// The routes that tell about the server: GET /v1/models (the flavour's fields), /health,
// /version, and the 404/405 for anything else (FastAPI's for vLLM and SGLang, cpp-httplib's for
// llama.cpp).
import { statusLine } from '../lib/http.js';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { LLAMA_CPP_NOT_FOUND } from './flavours/llama-cpp.js';

type Handler = (res: HttpResponse, req: HttpRequest) => void;

/** GET /v1/models: the OpenAI list with the served model, in the flavour's fields; built once. */
export function modelsRoute(ctx: SimContext): Handler {
  const body = ctx.flavour.models(ctx.opts.model, ctx.opts.maxModelLen, Math.floor(Date.now() / 1000));
  return (res) => {
    res.cork(() => {
      res.writeHeader('content-type', 'application/json');
      res.end(body);
    });
  };
}

/** GET /health: 200, the flavour's body (empty for vLLM and SGLang, `{"status":"ok"}` for llama.cpp). */
export function healthRoute(ctx: SimContext): Handler {
  const body = ctx.flavour.healthBody;
  return (res) => {
    res.cork(() => {
      if (body) res.writeHeader('content-type', 'application/json');
      res.end(body);
    });
  };
}

/** GET /version. */
export const versionRoute: Handler = (res) => {
  res.cork(() => {
    res.writeHeader('content-type', 'application/json');
    res.end('{"version":"rc-sim"}');
  });
};

/** Anything else: 405 for a wrong method on one of `knownPaths`, else 404, as FastAPI answers (llama.cpp: its 404 for both). */
export function notFoundRoute(knownPaths: readonly string[], llamaCpp = false): Handler {
  return (res, req) => {
    const known = !llamaCpp && knownPaths.includes(req.getUrl());
    res.cork(() => {
      res.writeStatus(statusLine(known ? 405 : 404));
      res.writeHeader('content-type', 'application/json');
      res.end(llamaCpp ? LLAMA_CPP_NOT_FOUND : known ? '{"detail":"Method Not Allowed"}' : '{"detail":"Not Found"}');
    });
  };
}
