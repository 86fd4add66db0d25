// The broker's own answers (refusals, redirects, 404): `{detail}` as JSON, counted under the
// tunnel route.
import { sendJson, type Res } from '../../lib/http.js';
import { NO_MODEL, type GatewayMetrics } from '../metrics.js';

export const TUNNEL_ROUTE = 'tunnel';

export function answer(metrics: GatewayMetrics, res: Res, status: number, detail: string, headers?: Record<string, string>): void {
  metrics.request(TUNNEL_ROUTE, NO_MODEL, status);
  sendJson(res, status, { detail }, headers);
}
