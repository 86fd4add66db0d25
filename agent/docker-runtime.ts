// The docker runtime: the Docker Engine API over its unix socket with undici. Pull (progress as
// pending "pulling image"), create (GPU device requests, labels with the instance id, port
// bindings, volume), start, stop, remove, list by label. Output is copied into the instance log
// file, so logs work the same way as in the process runtime.
import { createWriteStream, statSync } from 'node:fs';
import { Client } from 'undici';
import type { Logger } from '../lib/log.js';
import * as api from './docker-api.js';
import { FailureReason, RuntimeError } from './errors.js';
import { StartFailure, type ExitInfo, type Runtime, type StartContext } from './runtime.js';
import type { RuntimeRef } from './state.js';

export interface DockerRuntimeOptions {
  agentId: string;
  socketPath: string;
  /** Host address published ports bind to; default 0.0.0.0. */
  bindIp?: string;
  logger: Logger;
}

interface DockerResponse {
  status: number;
  json: unknown;
}

export class DockerRuntime implements Runtime {
  readonly kind = 'docker' as const;
  readonly checkHost = '127.0.0.1';
  private readonly client: Client;

  constructor(private readonly opts: DockerRuntimeOptions) {
    this.client = new Client('http://localhost', { socketPath: opts.socketPath });
  }

  /** Sends a request; returns status and parsed JSON body (undefined when empty). */
  private async call(req: api.DockerRequest, signal?: AbortSignal): Promise<DockerResponse> {
    try {
      const res = await this.client.request({
        method: req.method, path: req.path, signal,
        headers: req.body === undefined ? {} : { 'content-type': 'application/json' },
        body: req.body === undefined ? undefined : JSON.stringify(req.body),
      });
      const text = await res.body.text();
      let json: unknown;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = { message: text };
      }
      return { status: res.statusCode, json };
    } catch (err) {
      throw new RuntimeError(`Docker Engine API ${req.method} ${req.path} failed: ${(err as Error).message}`, { cause: err });
    }
  }

  private static message(r: DockerResponse): string {
    return (r.json as { message?: string } | undefined)?.message ?? `status ${r.status}`;
  }

  /** Pulls the image, reporting layer progress; throws StartFailure(pull_failed) on error. */
  private async pull(image: string, ctx: StartContext): Promise<void> {
    ctx.onProgress('pulling image');
    const req = api.pullRequest(image);
    let res;
    try {
      res = await this.client.request({ method: req.method, path: req.path, signal: ctx.signal });
    } catch (err) {
      throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${(err as Error).message}`);
    }
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${text.slice(0, 2000)}`);
    }
    const layers = new Map<string, string>();
    let rest = '';
    for await (const chunk of res.body) {
      rest += (chunk as Buffer).toString('utf8');
      let nl: number;
      while ((nl = rest.indexOf('\n')) >= 0) {
        const line = rest.slice(0, nl).trim();
        rest = rest.slice(nl + 1);
        if (!line) continue;
        let parsed;
        try {
          parsed = JSON.parse(line) as Parameters<typeof api.pullProgress>[0];
        } catch {
          continue;
        }
        const p = api.pullProgress(parsed, layers);
        if (typeof p !== 'string') throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${p.error}`);
        ctx.onProgress(p);
      }
    }
  }

  async start(ctx: StartContext): Promise<RuntimeRef> {
    if (!ctx.spec.image) throw new StartFailure(FailureReason.startFailed, 'The docker runtime needs an image');
    await this.pull(ctx.spec.image, ctx);
    ctx.onProgress('starting');
    const create = api.createContainerRequest({
      spec: ctx.spec, agentId: this.opts.agentId, gpus: ctx.gpus, hostPorts: ctx.hostPorts, bindIp: this.opts.bindIp ?? '0.0.0.0',
      homeDir: ctx.homeDir, volumePath: ctx.volumePath, agentEnv: ctx.agentEnv,
    });
    let res = await this.call(create);
    if (res.status === 409) {
      // A container of an earlier, interrupted attempt: replace it.
      await this.call(api.removeRequest(api.containerName(ctx.spec.instanceId)));
      res = await this.call(create);
    }
    if (res.status !== 201) throw new StartFailure(FailureReason.startFailed, `Creating the container failed: ${DockerRuntime.message(res)}`);
    const containerId = (res.json as { Id: string }).Id;
    const started = await this.call(api.startRequest(containerId));
    if (started.status !== 204 && started.status !== 304) {
      await this.call(api.removeRequest(containerId)).catch(() => undefined);
      throw new StartFailure(FailureReason.startFailed, `Starting the container failed: ${DockerRuntime.message(started)}`);
    }
    return { containerId };
  }

  describe(ref: RuntimeRef): string {
    return String(ref.containerId).slice(0, 12);
  }

  private async state(ref: RuntimeRef): Promise<{ running: boolean; exitCode: number | null } | undefined> {
    const r = await this.call(api.inspectRequest(String(ref.containerId)));
    if (r.status === 404) return undefined;
    const s = (r.json as { State?: { Running?: boolean; ExitCode?: number } }).State;
    return { running: Boolean(s?.Running), exitCode: s?.ExitCode ?? null };
  }

  async isRunning(ref: RuntimeRef): Promise<boolean> {
    return (await this.state(ref))?.running ?? false;
  }

  watchExit(ref: RuntimeRef, onExit: (exit: ExitInfo) => void): () => void {
    let stopped = false;
    const timer = setInterval(() => {
      void this.state(ref).then((s) => {
        if (stopped || s?.running) return;
        stopped = true;
        clearInterval(timer);
        onExit({ code: s?.exitCode ?? null, signal: null });
      }, (err: unknown) => this.opts.logger.warn('docker inspect failed', { err }));
    }, 1000);
    timer.unref();
    return () => {
      stopped = true;
      clearInterval(timer);
    };
  }

  attachLogs(ref: RuntimeRef, logFile: string): () => void {
    const controller = new AbortController();
    let since = 0;
    try {
      since = Math.floor(statSync(logFile).mtimeMs / 1000);
    } catch {
      // New log file: everything.
    }
    const out = createWriteStream(logFile, { flags: 'a' });
    const req = api.logsRequest(String(ref.containerId), since);
    void (async () => {
      const res = await this.client.request({ method: req.method, path: req.path, signal: controller.signal });
      const demux = new api.LogDemuxer();
      for await (const chunk of res.body) for (const payload of demux.push(chunk as Buffer)) out.write(payload);
    })().catch(() => undefined).finally(() => out.end());
    return () => controller.abort();
  }

  async stop(ref: RuntimeRef, graceMs: number): Promise<void> {
    const r = await this.call(api.stopRequest(String(ref.containerId), graceMs));
    if (r.status !== 204 && r.status !== 304 && r.status !== 404) throw new RuntimeError(`Stopping the container failed: ${DockerRuntime.message(r)}`);
  }

  async remove(ref: RuntimeRef): Promise<void> {
    const r = await this.call(api.removeRequest(String(ref.containerId)));
    if (r.status !== 204 && r.status !== 404) throw new RuntimeError(`Removing the container failed: ${DockerRuntime.message(r)}`);
  }

  async discover(): Promise<Map<string, RuntimeRef[]>> {
    const r = await this.call(api.listRequest(this.opts.agentId));
    const out = new Map<string, RuntimeRef[]>();
    if (r.status !== 200) return out;
    for (const c of r.json as { Id: string; Labels?: Record<string, string> }[]) {
      const id = c.Labels?.[api.LABEL_INSTANCE];
      if (!id) continue;
      out.set(id, [...(out.get(id) ?? []), { containerId: c.Id }]);
    }
    return out;
  }
}
