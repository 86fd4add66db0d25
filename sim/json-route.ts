// The body path of the sim's JSON routes that are not generations (/tokenize, /rc/cache-probe).
import { parseJsonObject, readBody, sendJson, track, type Res } from '../lib/http.js';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { NOT_AN_OBJECT, SimRequestError } from './request.js';

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
        const fail = (status: number, message: string, param?: string | null) => {
          const a = ctx.flavour.error(status, message, param);
          sendJson(r, a.status, a.body);
        };
        if (!body) return fail(400, NOT_AN_OBJECT);
        seen?.(body);
        try {
          sendJson(r, 200, answer(body));
        } catch (err) {
          if (err instanceof SimRequestError) return err.answer ? sendJson(r, err.answer.status, err.answer.body) : fail(err.status, err.message, err.param);
          ctx.log.error(`${what} failed`, { err });
          fail(500, 'Internal error in the sim');
        }
      },
      (err) => {
        const a = ctx.flavour.error(err.status, err.message);
        sendJson(r, a.status, a.body);
      },
    );
    return r;
  };
}
