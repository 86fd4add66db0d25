// One dedicated endpoint request: admission, then the verbatim relay to the instance.
//
// Admission, in order: a key (401) -> the key's account owns the instance, the instance serves
// a model API (vllm / sglang) and <port> is its routed port (else 403, the same answer whatever
// did not match, so nothing is learnt about other accounts' instances) -> not /v1/messages
// (404) -> the instance is ready (503 with Retry-After while it starts). After admission the
// backend's response is relayed verbatim. No model gates: credits pay for the instance.
//
// Per-tenant bounds (issue 44): an admitted request holds a place per instance, per account and
// per client address until its response ends, however it ends (lib/held-limits.ts;
// RC_DEDICATED_INFLIGHT_*), and its body, while it arrives, counts against the gateway's upload
// limits with the instance's own on top (lib/upload-limits.ts). Past one: 429 `{detail}` with
// Retry-After, naming the limit.
import type { HeldLimits } from '../../lib/held-limits.js';
import { clientAddress } from '../../lib/client-address.js';
import { declaredLength, readBody, sendJson, type BodyWatch, type Res } from '../../lib/http.js';
import { mainEndpoint, type InstanceRoutes } from '../../lib/instance-routes.js';
import { forward, forwardedHeaders, type InstancePools, ResponseRelay } from '../../lib/relay/forward.js';
import type { Upload } from '../../lib/upload-limits.js';
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
  /** Requests in flight per instance, account and client address. */
  inflight: HeldLimits;
}

/** What an admitted request is: its instance's address and the account whose key it carries. */
interface Admitted {
  address: string;
  accountId: number;
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
    const admitted = this.admit(res, req, target);
    if (admitted !== undefined && target) this.relay(res, req, target, admitted);
  }

  /** The instance's address for `target` and the caller's account, or undefined after answering a refusal. */
  private admit(res: Res, req: HttpRequest, target: DedicatedTarget | undefined): Admitted | undefined {
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
    return { address, accountId: auth };
  }

  /**
   * Relays the request (its body read first, within the limit and the upload limits) to the
   * instance, and the response back verbatim; refused with 429 when the instance, the account or
   * the client's address holds its most requests in flight.
   */
  private relay(res: Res, req: HttpRequest, target: DedicatedTarget, admitted: Admitted): void {
    const { pools, maxBodyBytes, inflight } = this.o;
    const { address, accountId } = admitted;
    const instanceId = target.instanceId;
    const client = clientAddress(res, req, this.ctx.trustProxy);
    const refusal = inflight.take(accountId, client, instanceId);
    if (refusal) {
      this.answer(res, 429, refusal.message, { 'retry-after': String(refusal.retryAfterSec) });
      return;
    }
    const metrics = this.ctx.metrics;
    this.o.routes.recordActivity(instanceId);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    const query = req.getQuery();
    const path = query ? `${target.path}?${query}` : target.path;
    const headers = forwardedHeaders(req, DROP_HEADERS);
    let upload: Upload | undefined;
    // Called once however the response ends (its end, the instance's failure, the client gone).
    const relay = new ResponseRelay(res, method, (status) => {
      inflight.give(accountId, client, instanceId);
      upload?.release();
      metrics.request(DEDICATED_ROUTE, NO_MODEL, status);
    });
    const length = declaredLength(req);
    const chunked = req.getHeader('transfer-encoding') !== '';
    if ((length === '' || length === '0') && !chunked) {
      forward(pools, address, { method, path, headers, body: undefined }, relay);
      return;
    }
    const watch: BodyWatch = (bytes, last) => {
      if (upload === undefined) {
        if (last) return true; // whole in one read: never in flight
        upload = this.ctx.uploads.start(client, accountId, instanceId);
      }
      const refused = upload.received(bytes, last);
      if (refused === undefined) return true;
      // The rest of the body is never read: the connection closes after the answer.
      res.closeAfter = true;
      relay.fail(429, refused.message, { 'retry-after': String(refused.retryAfterSec), 'x-rc-limit': refused.message });
      return false;
    };
    readBody(
      res,
      length,
      maxBodyBytes,
      (body) => {
        if (!relay.finished) forward(pools, address, { method, path, headers, body }, relay);
      },
      (err) => relay.fail(err.status, err.message),
      watch,
    );
  }
}
