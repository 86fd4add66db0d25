// POST /v1/chat/completions and POST /v1/responses: one generation each. Reads the body, applies
// the request's fault, plans the completion, waits for a slot in the running batch, then takes
// its KV cache blocks (the prefix cache lookup) and answers it whole or as a stream.
import { performance } from 'node:perf_hooks';
import { parseJsonObject, readBody } from '../lib/http.js';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { Call } from './calls.js';
import { planCompletion, type Api, type Completion } from './completion.js';
import type { SimContext } from './context.js';
import { answeredByFault, faultFor } from './fault-injection.js';
import type { Fault } from './faults.js';
import { answerWhole } from './non-stream.js';
import { NOT_AN_OBJECT, SimRequestError } from './request.js';
import { recordHeaders } from './stats.js';
import { StreamedAnswer } from './stream.js';

export function generationRoute(ctx: SimContext, api: Api): (res: HttpResponse, req: HttpRequest) => void {
  return (res, req) => {
    const call = ctx.calls.begin(res);
    recordHeaders(ctx.stats, req);
    const faultHeader = req.getHeader('x-sim-fault');
    readBody(
      call.res,
      req.getHeader('content-length'),
      ctx.opts.maxBodyBytes,
      (buf) => answer(ctx, call, api, faultHeader, buf),
      (err) => call.fail({ status: err.status, message: err.message }),
    );
  };
}

/** Once the body is read: the request's fault, then the completion, run when the batch has room. */
function answer(ctx: SimContext, call: Call, api: Api, faultHeader: string, buf: Buffer): void {
  let fault: Fault | undefined;
  try {
    fault = faultFor(faultHeader, ctx.faults);
  } catch (err) {
    if (err instanceof SimRequestError) return call.fail(err);
    throw err;
  }
  const body = parseJsonObject(buf);
  if (body) ctx.stats.lastBody = body;
  if (fault) {
    ctx.stats.faulted++;
    if (answeredByFault(call, fault)) return;
  }
  if (!body) return call.fail(new SimRequestError(400, NOT_AN_OBJECT, null));
  let completion: Completion;
  try {
    completion = planCompletion(ctx, body, api);
  } catch (err) {
    return failed(ctx, call, err);
  }
  // Only a sim that records first tokens reads the clock here.
  const arrived = ctx.stats.firstTokenMs !== undefined ? performance.now() : 0;
  ctx.batch.admit(call, () => run(ctx, call, completion, fault, arrived));
}

/** The call has a batch slot: its KV cache blocks (and cached tokens), held until it ends, then the answer. */
function run(ctx: SimContext, call: Call, completion: Completion, fault: Fault | undefined, arrived: number): void {
  try {
    const blocks = ctx.kv.admit(completion.promptTokens, completion.promptIds, completion.plan.completionTokens);
    call.onEnd(blocks.release);
    completion.cachedTokens = blocks.cachedTokens;
    ctx.stats.promptTokensTotal += completion.promptTokens;
    ctx.stats.generationTokensTotal += completion.plan.completionTokens;
    if (ctx.kv.prefix) {
      // As vLLM v1 counts them: every prompt token is a query, every cached one a hit.
      ctx.stats.prefixCacheQueries += completion.promptTokens;
      ctx.stats.prefixCacheHits += blocks.cachedTokens;
    }
    ctx.stats.lastFirstTokenMs = ctx.pace.fast ? 0 : ctx.pace.firstTokenMs(completion.uncachedTokens);
    let engineMs: number | undefined;
    if (ctx.stats.firstTokenMs !== undefined) ctx.stats.firstTokenMs.push((engineMs = performance.now() - arrived + ctx.stats.lastFirstTokenMs));
    if (completion.stream) new StreamedAnswer(call, completion, fault, ctx.pace, ctx.flavour, ctx.opts.instanceName, engineMs).send();
    else answerWhole(call, completion, fault, ctx.pace);
  } catch (err) {
    failed(ctx, call, err);
  }
}

/** The server's error for what it refuses; anything else is the sim's own failure: logged, a 500. */
function failed(ctx: SimContext, call: Call, err: unknown): void {
  if (err instanceof SimRequestError) return call.fail(err);
  ctx.log.error('chat completion failed', { err });
  call.fail({ status: 500, message: 'Internal error in the sim' });
}
