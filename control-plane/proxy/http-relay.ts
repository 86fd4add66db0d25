// The proxy's HTTP side: `/_rc/auth` on an instance's origin redeems a hand-over ticket; every
// other request that ProxyAccess admits goes to the instance's app through the pooled
// connections (its body read first when it has one), the response streamed back.
import { declaredLength, readBody, sendJson, track } from '../../lib/http.js';
import type { HttpRequest, HttpResponse } from '../../lib/uws.js';
import { forward, forwardedHeaders, type InstancePools, ResponseRelay } from '../../lib/relay/forward.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import type { ProxyAccess } from './access.js';
import { AUTH_PATH } from './handover.js';

const DROP_HEADERS: ReadonlySet<string> = new Set();

export interface HttpRelayOptions {
  access: ProxyAccess;
  /** Traffic counts as activity (throttled by the routes). */
  routes: InstanceRoutes;
  pools: InstancePools;
  /** Largest request body (413 beyond). */
  maxBodyBytes: number;
}

export class HttpRelay {
  constructor(private readonly o: HttpRelayOptions) {}

  /** uWS's handler of every method and path. */
  handle(uwsRes: HttpResponse, req: HttpRequest): void {
    const { access, routes, pools } = this.o;
    const res = track(uwsRes);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    if (req.getUrl() === AUTH_PATH) {
      const instanceId = access.instanceOf(req);
      if (instanceId !== undefined)
        return method === 'GET' ? access.redeem(res, req, instanceId) : sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: 'GET' });
    }
    const target = access.admit(req, method);
    if (!('address' in target)) {
      sendJson(res, target.status, { detail: target.detail }, target.headers);
      return;
    }
    routes.recordActivity(target.instanceId);
    const headers = forwardedHeaders(req, DROP_HEADERS);
    const relay = new ResponseRelay(res, method);
    const length = declaredLength(req);
    if ((length === '' || length === '0') && req.getHeader('transfer-encoding') === '') {
      forward(pools, target.address, { method, path: target.path, headers, body: undefined }, relay);
      return;
    }
    readBody(
      res,
      length,
      this.o.maxBodyBytes,
      (body) => {
        if (!relay.finished) forward(pools, target.address, { method, path: target.path, headers, body }, relay);
      },
      (err) => relay.fail(err.status, err.message),
    );
  }
}
