// The body path of the sim's JSON routes that are not generations (/tokenize, /rc/cache-probe).
import { parseJsonObject, readBody, sendJson, track, type Res } from '../lib/http.js';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { NOT_AN_OBJECT, SimRequestError, vllmError } from './request.js';

/**
 * The body of a sim JSON route that is not a generation (/tokenize, /rc/cache-probe): read with
 * the size limit, a JSON object, then `answer` (200); vLLM's errors for what it refuses, a logged
 * 500 for the sim's own failure. `seen` gets the body first (stats).
 */
export function jsonRoute(
  ctx: SimContext,
  what: string,
  answer: (body: Record<string, unknown>) => unknown,
  seen?: (body: Record<string, unknown>) => void,
): (res: HttpResponse, req: HttpRequest) => Res {
  return (res, req) => {
    const r = track(res);
    readBody(
      r,
      req.getHeader('content-length'),
      ctx.opts.maxBodyBytes,
      (buf) => {
        const body = parseJsonObject(buf);
        if (!body) return sendJson(r, 400, vllmError(400, NOT_AN_OBJECT));
        seen?.(body);
        try {
          sendJson(r, 200, answer(body));
        } catch (err) {
          if (err instanceof SimRequestError) return sendJson(r, err.status, err.body());
          ctx.log.error(`${what} failed`, { err });
          sendJson(r, 500, vllmError(500, 'Internal error in the sim'));
        }
      },
      (err) => sendJson(r, err.status, vllmError(err.status, err.message)),
    );
    return r;
  };
}
