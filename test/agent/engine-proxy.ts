// A recording proxy in front of the real Docker engine, on a unix socket of its own: every request
// passes through to the engine (streams included), and the test sees what the agent sent. Two
// rewrites let GPU paths run on an engine without GPUs: `patchInfo` edits GET /info's answer (an
// engine with the NVIDIA runtime), and `stripDeviceRequests` removes the GPU device request from a
// container create after recording the body the agent sent (the engine has no nvidia driver).
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { join } from 'node:path';

export interface RecordedRequest {
  method: string;
  /** Without the API version prefix: `/containers/create?name=...`. */
  path: string;
  body: any;
}

export interface EngineProxyOptions {
  engineSocket: string;
  /** Directory for the proxy's socket. */
  dir: string;
  patchInfo?: (info: any) => any;
  stripDeviceRequests?: boolean;
}

export class EngineProxy {
  readonly socketPath: string;
  readonly requests: RecordedRequest[] = [];
  private server: Server | undefined;

  constructor(private readonly opts: EngineProxyOptions) {
    this.socketPath = join(opts.dir, 'engine.sock');
  }

  /** Container create bodies the agent sent, by container name. */
  creates(): Map<string, any> {
    const out = new Map<string, any>();
    for (const r of this.requests) {
      const m = /^\/containers\/create\?name=([^&]+)/.exec(r.path);
      if (r.method === 'POST' && m) out.set(decodeURIComponent(m[1]!), r.body);
    }
    return out;
  }

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.forward(req, res));
    await new Promise<void>((resolve) => this.server!.listen(this.socketPath, resolve));
  }

  private async forward(req: IncomingMessage, res: import('node:http').ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let raw = Buffer.concat(chunks);
    const path = (req.url ?? '/').replace(/^\/v\d+\.\d+/, '');
    let body: any;
    if (raw.length && /json/.test(String(req.headers['content-type']))) body = JSON.parse(raw.toString('utf8'));
    this.requests.push({ method: req.method ?? 'GET', path, body: body === undefined ? undefined : structuredClone(body) });
    if (this.opts.stripDeviceRequests && req.method === 'POST' && path.startsWith('/containers/create') && body?.HostConfig) {
      body.HostConfig.DeviceRequests = [];
      raw = Buffer.from(JSON.stringify(body));
    }
    const headers = { ...req.headers, 'content-length': String(raw.length) };
    const upstream = request({ socketPath: this.opts.engineSocket, method: req.method, path: req.url, headers }, (up) => {
      const patch = this.opts.patchInfo && req.method === 'GET' && path === '/info';
      if (!patch) {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
        return;
      }
      const parts: Buffer[] = [];
      up.on('data', (c: Buffer) => parts.push(c));
      up.on('end', () => {
        const out = Buffer.from(JSON.stringify(this.opts.patchInfo!(JSON.parse(Buffer.concat(parts).toString('utf8')))));
        const h = { ...up.headers, 'content-length': String(out.length) };
        delete h['transfer-encoding'];
        res.writeHead(up.statusCode ?? 502, h);
        res.end(out);
      });
    });
    upstream.on('error', (err) => {
      if (!res.headersSent) res.writeHead(502);
      res.end(err.message);
    });
    res.on('close', () => upstream.destroy());
    upstream.end(raw);
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
