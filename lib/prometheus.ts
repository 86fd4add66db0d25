// The Prometheus listeners of the gateway and the control plane: GET /metrics on a port of its
// own and nothing else, never on a public port (whose clients are anyone: the gateway's counters
// show traffic and backends, the control plane's gauges every host, GPU and instance). Bind it
// where only Prometheus reaches (loopback, or a private address); RC_METRICS_HOST.
import { listen, send, track, type Server } from './http.js';
import { uws, type HttpResponse } from './uws.js';

/** The exposition format's content type (text format 0.0.4). */
export const EXPOSITION_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** A label value escaped for the text format (backslash, double quote, line feed). */
export function labelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

/** Listens on host:port; GET /metrics answers `render()`, anything else 404. */
export function listenMetrics(render: () => string, host: string, port: number): Promise<Server> {
  const app = uws().App();
  app.get('/metrics', (res: HttpResponse) => {
    send(track(res), 200, render(), EXPOSITION_TYPE);
  });
  app.any('/*', (res: HttpResponse) => {
    send(track(res), 404, 'not found: this listener serves GET /metrics only\n', 'text/plain; charset=utf-8');
  });
  return listen(app, host, port);
}
