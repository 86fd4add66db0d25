// The platform API's route table on uWS. A route declares its method, path, who may call it and
// the zod schema of its body; the router does the uWS plumbing (abort tracking, body limit,
// JSON parsing, credentials, CSRF, error replies) so handlers only see typed input and return
// a reply. Every failure becomes a 4xx `{ detail }`; an unexpected throw is logged and is a 500.
import type { z } from 'zod';
import { RcError } from '../lib/errors.js';
import { requestId, type Logger } from '../lib/log.js';
import { secureCookies, type CookieSecureMode } from '../lib/session-cookie.js';
import { declaredLength, nestsDeeperThan, readBody, statusLine, track, type Res } from '../lib/http.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../lib/uws.js';
import { checkCsrf, identify, type Caller, type CredentialHeaders } from './auth.js';
import { API_ERRORS, ApiError } from './errors.js';
import type { Store } from './store.js';
import { openSse, type Sse } from './sse.js';
import { HeldLimits } from '../lib/held-limits.js';
import { clientAddress } from '../lib/client-address.js';
import { parseInput } from './validate.js';
import { checkSameOriginJson, type OriginHeaders } from './auth/same-origin.js';

export type Method = 'get' | 'post' | 'put' | 'del';

/**
 * none: no credential looked at; optional: a credential adds the caller (a bad key still 401s);
 * required: S+K; admin: the data dir's admin token in the x-rc-admin-token header; internal: the
 * internal token (gateways learning from the control plane) in the x-rc-internal-token header;
 * operator: an operator account's browser session (no credential 401; a key or a non-operator 403;
 * CSRF on writes like every session write).
 */
export type Access = 'none' | 'optional' | 'required' | 'admin' | 'internal' | 'operator';

export interface Reply {
  status?: number;
  body?: unknown;
  /** A server-sent event stream instead of a JSON body: called with the opened stream (headers sent). */
  sse?: (stream: Sse) => void;
  headers?: Record<string, string>;
  /** Set-Cookie values. */
  cookies?: string[];
}

export interface RequestInfo<B, Q = undefined> {
  /** Route parameters in path order (`:id` -> params[0]). */
  params: string[];
  body: B;
  /** The query string parsed with the route's `query` schema (undefined without one). */
  query: Q;
  /** Request header values the handlers use ('' when absent). */
  forwardedProto: string;
  /** The client's IP address (the last X-Forwarded-For entry when the reverse proxy is trusted). */
  clientAddress: string;
}

export interface Route<
  S extends z.ZodType | undefined = z.ZodType | undefined,
  A extends Access = Access,
  Q extends z.ZodType | undefined = z.ZodType | undefined,
> {
  method: Method;
  path: string;
  access: A;
  body?: S;
  /** Schema of the query parameters (an object of strings, first value of each name). */
  query?: Q;
  /** One line for the OpenAPI document (openapi.ts). */
  summary?: string;
  /** The reply is a server-sent event stream (documented as text/event-stream). */
  stream?: boolean;
  /** An empty body is read as `{}` (a body whose fields are all optional, such as the launch body). */
  optionalBody?: boolean;
  /** Refuse non-JSON and cross-origin browser requests before anything else (login CSRF: auth/same-origin.ts). */
  sameOriginJson?: boolean;
  handle(
    req: RequestInfo<S extends z.ZodType ? z.output<S> : undefined, Q extends z.ZodType ? z.output<Q> : undefined>,
    caller: A extends 'required' | 'operator' ? Caller : Caller | undefined,
  ): Reply | Promise<Reply>;
}

/** Declares a route with its types inferred. */
export function route<S extends z.ZodType | undefined, A extends Access, Q extends z.ZodType | undefined = undefined>(r: Route<S, A, Q>): Route<S, A, Q> {
  return r;
}

export interface RouterDeps {
  store: Store;
  logger: Logger;
  maxBodyBytes: number;
  /** Checks the admin token header value. */
  isAdmin(token: string): boolean;
  /** Checks the internal token header value (false for all when the control plane has none). */
  isInternal?(token: string): boolean;
  /** Behind a trusted reverse proxy: X-Forwarded-For and X-Forwarded-Host count. */
  trustProxy?: boolean;
  /** RC_COOKIE_SECURE: which session cookie name is read (lib/session-cookie.ts); default auto. */
  cookieSecure?: CookieSecureMode;
  /** Event streams open per account and per client address (`stream` routes; RC_API_STREAMS_*); none: not bounded. */
  streams?: HeldLimits;
}

/** Seconds a refused event stream is told to wait: the caller's other streams close when their pages do. */
export const API_STREAM_RETRY_AFTER_SEC = 30;

/** The event streams' bounds (RouterDeps.streams) from the settings. */
export function apiStreamLimits(s: { apiStreamsPerAccount: number; apiStreamsPerAddress: number }): HeldLimits {
  return new HeldLimits(
    'event streams',
    { perAccount: s.apiStreamsPerAccount, perAddress: s.apiStreamsPerAddress },
    { perAccount: 'RC_API_STREAMS_PER_ACCOUNT', perAddress: 'RC_API_STREAMS_PER_ADDRESS' },
    API_STREAM_RETRY_AFTER_SEC,
  );
}

/** A stream route's place (RouterDeps.streams), given back once: when its stream closes, or when no stream opened. */
interface StreamPlace {
  release(): void;
}

/** Takes a stream route's place for the caller and its address, or throws 429 stream_limit_exceeded. */
function holdStream(streams: HeldLimits, caller: Caller | undefined, address: string): StreamPlace {
  // Every stream route needs a caller; one without (none so far) is counted per address alone, under account 0.
  const account = caller?.account.id ?? 0;
  const refusal = streams.take(account, address);
  if (refusal) throw API_ERRORS.streamLimit(refusal.message, refusal.retryAfterSec);
  let held = true;
  return {
    release() {
      if (!held) return;
      held = false;
      streams.give(account, address);
    },
  };
}

/** Operator routes: an operator account's browser session (keys are for scripts; the admin token is the scripts' operator credential). */
function checkOperator(caller: Caller): void {
  if (caller.via !== 'session') throw API_ERRORS.operatorSessionOnly();
  if (!caller.account.isOperator) throw API_ERRORS.operatorOnly();
}

/** A response and the request id it answers under (echoed from `x-request-id`, or generated). */
type ApiRes = Res & { requestId?: string };

/** An `x-request-id` a client may choose: short and printable, else we generate one. */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

function write(res: ApiRes, status: number, body: unknown, headers?: Record<string, string>, cookies?: string[]): void {
  if (res.aborted) return;
  res.aborted = true;
  const json = JSON.stringify(body);
  res.cork(() => {
    res.writeStatus(statusLine(status));
    res.writeHeader('content-type', 'application/json');
    res.writeHeader('cache-control', 'no-store');
    if (res.requestId) res.writeHeader('x-request-id', res.requestId);
    if (headers) for (const k in headers) res.writeHeader(k, headers[k]!);
    if (cookies) for (const c of cookies) res.writeHeader('set-cookie', c);
    res.end(json, res.closeAfter === true);
  });
}

/** A failure of the error table (errors.ts) as SPEC's `{ detail }` reply. */
function refuse(res: ApiRes, err: ApiError): void {
  write(res, err.status, { detail: err.detail }, err.headers);
}

function fail(res: ApiRes, err: unknown, logger: Logger): void {
  if (err instanceof ApiError) {
    // The internal code is for the logs; the reply carries SPEC's detail only.
    logger.debug('request refused', { code: err.code, publicCode: err.publicCode, status: err.status, requestId: res.requestId });
    return refuse(res, err);
  }
  // Typed errors from other parts (for example the gates' usage reader) keep their status;
  // every 503 carries Retry-After.
  const e = err as { status?: number; message?: string };
  if (err instanceof RcError && e.status! >= 400 && e.status! < 600 && e.status !== 500) {
    return write(res, e.status!, { detail: e.message }, e.status === 503 || e.status === 429 ? { 'retry-after': '5' } : undefined);
  }
  logger.error('unexpected error', { err, requestId: res.requestId });
  refuse(res, API_ERRORS.internal());
}

function parseBody(buf: Buffer): unknown {
  if (buf.length === 0) throw API_ERRORS.notAnObject();
  let v: unknown;
  try {
    v = JSON.parse(buf.toString('utf8'));
  } catch {
    throw API_ERRORS.invalidJson();
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw API_ERRORS.notAnObject();
  if (nestsDeeperThan(v)) throw API_ERRORS.tooDeep();
  return v;
}

/** The route's path parameters, percent-decoded; undefined when one is malformed (`%zz`, a cut UTF-8 sequence). */
function pathParams(req: HttpRequest, count: number): string[] | undefined {
  const params: string[] = [];
  try {
    for (let i = 0; i < count; i++) params.push(decodeURIComponent(req.getParameter(i) ?? ''));
  } catch {
    return undefined; // URIError: thrown in a uWS handler it would end the process
  }
  return params;
}

/** The query string as an object: the first value of each name. */
function queryObject(raw: string): Record<string, string> {
  const out: Record<string, string> = Object.create(null) as Record<string, string>; // `__proto__` is a name like any other
  for (const [k, v] of new URLSearchParams(raw)) if (!Object.hasOwn(out, k)) out[k] = v;
  return out;
}

/** Sends a reply: JSON, or the start of an event stream (which holds `place` until it closes). */
function reply(res: ApiRes, out: Reply, place: StreamPlace | undefined): void {
  if (out.sse) {
    if (res.aborted) {
      place?.release();
      return;
    }
    const sse = openSse(res, res.requestId);
    if (place) sse.onClose(place.release);
    out.sse(sse);
    return;
  }
  place?.release();
  write(res, out.status ?? 200, out.body, out.headers, out.cookies);
}

/** Registers `routes` on `app`, plus 405 for other methods on their paths and a JSON 404 for the rest. */
export function mount(app: TemplatedApp, routes: readonly Route[], deps: RouterDeps): void {
  const paths = new Map<string, Set<Method>>();
  for (const r of routes) {
    const paramCount = (r.path.match(/\/:/g) ?? []).length;
    const hasBody = r.method !== 'get';
    app[r.method](r.path, (uwsRes: HttpResponse, req: HttpRequest) => {
      const res: ApiRes = track(uwsRes);
      // Everything from req must be read now: it is invalid after the first await or callback.
      const clientId = req.getHeader('x-request-id');
      res.requestId = CLIENT_REQUEST_ID.test(clientId) ? clientId : requestId();
      const params = pathParams(req, paramCount);
      if (!params) return refuse(res, API_ERRORS.malformedPath());
      const forwardedProto = req.getHeader('x-forwarded-proto');
      const creds: CredentialHeaders = {
        authorization: req.getHeader('authorization'),
        cookie: req.getHeader('cookie'),
        csrf: req.getHeader('x-csrf-token'),
        secure: secureCookies(deps.cookieSecure ?? 'auto', forwardedProto),
      };
      const adminToken = r.access === 'admin' ? req.getHeader('x-rc-admin-token') : r.access === 'internal' ? req.getHeader('x-rc-internal-token') : '';
      const address = clientAddress(uwsRes, req, deps.trustProxy === true);
      const originHeaders: OriginHeaders | undefined = r.sameOriginJson
        ? {
            origin: req.getHeader('origin'),
            contentType: req.getHeader('content-type'),
            secFetchSite: req.getHeader('sec-fetch-site'),
            host: req.getHeader('host'),
            forwardedHost: deps.trustProxy ? req.getHeader('x-forwarded-host') : '',
          }
        : undefined;
      const rawQuery = r.query ? (req.getQuery() ?? '') : '';
      const run = async (raw: Buffer | undefined) => {
        let place: StreamPlace | undefined;
        try {
          if (originHeaders) checkSameOriginJson(originHeaders, r.body !== undefined && !r.optionalBody);
          let caller: Caller | undefined;
          if (r.access === 'admin') {
            if (!deps.isAdmin(adminToken)) throw API_ERRORS.adminTokenInvalid();
          } else if (r.access === 'internal') {
            if (!deps.isInternal?.(adminToken)) throw API_ERRORS.internalTokenInvalid();
          } else if (r.access !== 'none') {
            const who = await identify(deps.store, creds, r.access === 'optional');
            if (who instanceof ApiError) throw who;
            if (!who && r.access !== 'optional') throw API_ERRORS.noApiKey();
            if (who && r.access === 'operator') checkOperator(who);
            caller = who;
            if (caller && hasBody) checkCsrf(caller, creds.csrf);
          }
          const body = r.body && raw ? parseInput(r.body, raw.length === 0 && r.optionalBody ? {} : parseBody(raw)) : undefined;
          const query = r.query ? parseInput(r.query, queryObject(rawQuery)) : undefined;
          // Counted before the handler starts the stream's work (an agent's log stream, bus subscriptions).
          if (r.stream && deps.streams) place = holdStream(deps.streams, caller, address);
          reply(res, await r.handle({ params, body, query, forwardedProto, clientAddress: address } as RequestInfo<never, never>, caller as Caller), place);
        } catch (err) {
          place?.release();
          fail(res, err, deps.logger);
        }
      };
      if (!hasBody) return void run(undefined);
      readBody(
        res,
        declaredLength(req),
        deps.maxBodyBytes,
        (raw) => void run(raw),
        (err) => write(res, err.status, { detail: err.message }),
      );
    });
    const set = paths.get(r.path) ?? new Set<Method>();
    set.add(r.method);
    paths.set(r.path, set);
  }
  for (const [path, methods] of paths) {
    const allow = [...methods].map((m) => (m === 'del' ? 'DELETE' : m.toUpperCase())).join(', ');
    const wrongMethod = API_ERRORS.methodNotAllowed(allow);
    app.any(path, (res) => refuse(track(res), wrongMethod));
  }
  const noRoute = API_ERRORS.notFound();
  app.any('/*', (res) => refuse(track(res), noRoute));
}
