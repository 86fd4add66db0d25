// POST /v1/chat/completions and POST /v1/responses: one generation each. Reads the body, applies
// the request's fault, then plans the completion and answers it whole or as a stream.
import { parseJsonObject, readBody } from '../lib/http.js';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { Call } from './calls.js';
import { planCompletion, type Api } from './completion.js';
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

/** Once the body is read: the request's fault, then the completion. */
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
  try {
    const completion = planCompletion(ctx, body, api);
    if (completion.stream) new StreamedAnswer(call, completion, fault, ctx.pace).send();
    else answerWhole(call, completion, fault, ctx.pace);
  } catch (err) {
    if (err instanceof SimRequestError) return call.fail(err);
    ctx.log.error('chat completion failed', { err });
    call.fail({ status: 500, message: 'Internal error in the sim' });
  }
}
