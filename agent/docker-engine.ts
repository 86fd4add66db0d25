// The docker runtime's connection to the Docker Engine API: its unix socket through undici, the
// API version negotiated on /_ping. Short calls share a small pool; long-lived ones (wait, logs,
// pull) get a connection of their own, so a long poll never holds up the calls queued behind it.
import { Client, Pool, type Dispatcher } from 'undici';
import * as api from './docker-api.js';
import { RuntimeError } from './errors.js';

export interface DockerResponse {
  status: number;
  json: unknown;
  headers: Record<string, string | string[] | undefined>;
}

export class DockerEngine {
  /** Short calls; long-lived ones get a connection of their own (longLived). */
  private readonly client: Pool;
  private version = api.MIN_API_VERSION;

  constructor(readonly socketPath: string) {
    this.client = new Pool('http://localhost', { socketPath, connections: 8 });
  }

  /** The engine's error message of a response (or its status). */
  static message(r: DockerResponse): string {
    return (r.json as { message?: string } | undefined)?.message ?? `status ${r.status}`;
  }

  private path(req: api.DockerRequest): string {
    return req.path === '/_ping' ? req.path : `/v${this.version}${req.path}`;
  }

  /** Pings the engine and settles on the API version both sides speak; returns it. */
  async negotiate(): Promise<string> {
    const ping = await this.call(api.pingRequest(), { timeoutMs: 5000 });
    if (ping.status !== 200) throw new RuntimeError(`The Docker engine at ${this.socketPath} answered /_ping with status ${ping.status}`);
    const server = ping.headers['api-version'];
    const version = api.negotiateApiVersion(Array.isArray(server) ? server[0] : server);
    if (!version) throw new RuntimeError(`The Docker engine speaks API ${String(server)}; the oldest supported is ${api.MIN_API_VERSION}`);
    this.version = version;
    return version;
  }

  /** Sends a request; returns status and parsed JSON body (undefined when empty). */
  async call(req: api.DockerRequest, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<DockerResponse> {
    try {
      const res = await this.client.request({
        method: req.method,
        path: this.path(req),
        signal: options.signal,
        headers: req.body === undefined ? {} : { 'content-type': 'application/json' },
        body: req.body === undefined ? undefined : JSON.stringify(req.body),
        headersTimeout: options.timeoutMs ?? 300_000,
        bodyTimeout: options.timeoutMs ?? 300_000,
      });
      const text = await res.body.text();
      let json: unknown;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = { message: text };
      }
      return { status: res.statusCode, json, headers: res.headers };
    } catch (err) {
      throw new RuntimeError(`Docker Engine API ${req.method} ${req.path} failed: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * A request on its own connection, closed when the response ends: a long poll or a stream must
   * not hold up the short calls queued behind it.
   */
  async longLived(req: api.DockerRequest, options: { signal?: AbortSignal; headersTimeoutMs?: number }): Promise<Dispatcher.ResponseData & { close(): void }> {
    const client = new Client('http://localhost', { socketPath: this.socketPath });
    const close = () => void client.close().catch(() => undefined);
    try {
      const res = await client.request({
        method: req.method,
        path: this.path(req),
        signal: options.signal,
        headersTimeout: options.headersTimeoutMs ?? 300_000,
        bodyTimeout: 0,
      });
      res.body.once('close', close);
      return Object.assign(res, { close });
    } catch (err) {
      close();
      throw err;
    }
  }

  close(): void {
    void this.client.close().catch(() => undefined);
  }
}
