// One dedicated endpoint request: admission, then the verbatim relay to the instance.
//
// Admission, in order: a key (401) -> the key's account owns the instance, the instance serves
// a model API (vllm / sglang) and <port> is its routed port (else 403, the same answer whatever
// did not match, so nothing is learnt about other accounts' instances) -> not /v1/messages
// (404) -> the instance is ready (503 with Retry-After while it starts). After admission the
// backend's response is relayed verbatim. No model gates: credits pay for the instance.
import { declaredLength, readBody, sendJson, type Res } from '../../lib/http.js';
import { mainEndpoint, type InstanceRoutes } from '../../lib/instance-routes.js';
import { forward, forwardedHeaders, type InstancePools, ResponseRelay } from '../../lib/relay/forward.js';
import type { HttpRequest } from '../../lib/uws.js';
import { AUTH_MISSING } from '../auth/keys.js';
import type { GatewayContext } from '../context.js';
import { NO_MODEL } from '../metrics.js';
import { isMessagesPath, type DedicatedTarget } from './urls.js';

export const DEDICATED_ROUTE = 'dedicated';
/** Instance types whose routed port is a model API reachable with a key. */
export const SERVING_TYPES: ReadonlySet<string> = new Set(['vllm', 'sglang']);

export const NO_ACCESS = 'You do not have access to this instance';
export const STARTING = 'Instance is still starting; retry after the Retry-After delay';
export const MESSAGES_NOT_SERVED = 'Not Found: /v1/messages is not served on a dedicated endpoint (no protocol translation); use /v1/chat/completions';

/** The platform key and its twin never reach the instance. */
const DROP_HEADERS: ReadonlySet<string> = new Set(['authorization', 'x-api-key']);

export interface DedicatedRelayOptions {
  routes: InstanceRoutes;
  pools: InstancePools;
  /** Largest request body (413 beyond). */
  maxBodyBytes: number;
  /** Retry-After (seconds) of the 503 while an instance starts. */
  retryAfter: string;
}

export class DedicatedRelay {
  constructor(
    private readonly ctx: GatewayContext,
    private readonly o: DedicatedRelayOptions,
  ) {}

  /** The relay's own answers: `{detail}` as JSON, counted under the dedicated route. */
  answer(res: Res, status: number, detail: string, headers?: Record<string, string>): void {
    this.ctx.metrics.request(DEDICATED_ROUTE, NO_MODEL, status);
    sendJson(res, status, { detail }, headers);
  }

  /** Admission then relay; `target` undefined: a malformed URL (403 after the key check). */
  handle(res: Res, req: HttpRequest, target: DedicatedTarget | undefined): void {
    const address = this.admit(res, req, target);
    if (address !== undefined && target) this.relay(res, req, target, address);
  }

  /** The instance's address for `target`, or undefined after answering a refusal. */
  private admit(res: Res, req: HttpRequest, target: DedicatedTarget | undefined): string | undefined {
    const auth = this.ctx.authenticate(req.getHeader('authorization'), req.getHeader('x-api-key'));
    if (typeof auth !== 'number') {
      this.answer(res, 401, auth === AUTH_MISSING ? 'Unauthorized: No API key provided.' : 'Invalid bearer token');
      return undefined;
    }
    const route = target && this.o.routes.get(target.instanceId);
    const port = target && route ? (target.port ?? mainEndpoint(route)?.port) : undefined;
    const address = route && port !== undefined && route.accountId === auth && SERVING_TYPES.has(route.instanceType) ? route.ports.get(port) : undefined;
    if (!target || !route || address === undefined || (route.status !== 'ready' && route.status !== 'pending')) {
      this.answer(res, 403, NO_ACCESS);
      return undefined;
    }
    if (isMessagesPath(target.path)) {
      this.answer(res, 404, MESSAGES_NOT_SERVED);
      return undefined;
    }
    if (route.status !== 'ready' || address === '') {
      this.answer(res, 503, STARTING, { 'retry-after': this.o.retryAfter });
      return undefined;
    }
    return address;
  }

  /** Relays the request (its body read first, within the limit) to `address`, and the response back verbatim. */
  private relay(res: Res, req: HttpRequest, target: DedicatedTarget, address: string): void {
    const { pools, maxBodyBytes } = this.o;
    const metrics = this.ctx.metrics;
    this.o.routes.recordActivity(target.instanceId);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    const query = req.getQuery();
    const path = query ? `${target.path}?${query}` : target.path;
    const headers = forwardedHeaders(req, DROP_HEADERS);
    const relay = new ResponseRelay(res, method, (status) => metrics.request(DEDICATED_ROUTE, NO_MODEL, status));
    const length = declaredLength(req);
    const chunked = req.getHeader('transfer-encoding') !== '';
    if ((length === '' || length === '0') && !chunked) {
      forward(pools, address, { method, path, headers, body: undefined }, relay);
      return;
    }
    readBody(
      res,
      length,
      maxBodyBytes,
      (body) => {
        if (!relay.finished) forward(pools, address, { method, path, headers, body }, relay);
      },
      (err) => relay.fail(err.status, err.message),
    );
  }
}
