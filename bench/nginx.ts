// nginx as the reference relay of the load benchmarks: Debian's nginx (nginx-light is enough),
// one process (master_process off, so its CPU is one pid's), proxy_pass to the same backend with
// keep-alive upstream connections and buffering off: a C relay that does no auth, no parsing,
// no gates. Installed with apt-get when missing (as root), else the scenario is skipped.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findOrInstall } from './apt.js';
import { stopper, type SpawnedTarget } from './load.js';

const NGINX_PATHS = ['/usr/sbin/nginx', '/usr/bin/nginx'];

/** The nginx binary, installing Debian's nginx-light when none is found; undefined when that fails. */
export function findNginx(): string | undefined {
  return findOrInstall(NGINX_PATHS, 'nginx-light');
}

/** A TCP port that was free a moment ago. */
export function sparePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/**
 * The configuration: one process, keep-alive to the backend, nothing buffered, no logs. Neither side's
 * connections are closed after 1000 requests (nginx's default): the gateway never closes them either.
 */
export function nginxConfig(dir: string, port: number, backend: URL): string {
  return `daemon off;
master_process off;
worker_processes 1;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'body')};
  proxy_temp_path ${join(dir, 'proxy')};
  upstream backend { server ${backend.host}; keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:${port};
    keepalive_requests 1000000;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
}
`;
}

/** nginx's arguments in front of `backendUrl`, its files in `dir`, and the URL it will listen on. */
export async function nginxCommand(dir: string, backendUrl: string): Promise<{ args: string[]; url: string }> {
  const port = await sparePort();
  const conf = join(dir, 'nginx.conf');
  writeFileSync(conf, nginxConfig(dir, port, new URL(backendUrl)));
  return { args: ['-p', dir, '-c', conf, '-e', join(dir, 'error.log')], url: `http://127.0.0.1:${port}` };
}

/** Starts nginx in front of `backendUrl`; `cpu` pins it with taskset. Undefined when nginx cannot run here. */
export async function startNginx(label: string, backendUrl: string, opts: { cpu?: number } = {}): Promise<SpawnedTarget | undefined> {
  const bin = findNginx();
  if (!bin) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'rc-bench-nginx-'));
  const { args, url } = await nginxCommand(dir, backendUrl);
  const child = opts.cpu !== undefined ? spawn('taskset', ['-c', String(opts.cpu), bin, ...args], { stdio: 'ignore' }) : spawn(bin, args, { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await fetch(`${url}/health`);
      break;
    } catch {
      if (child.exitCode !== null || Date.now() > deadline) {
        rmSync(dir, { recursive: true, force: true });
        return undefined;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const stop = stopper(child, exited);
  return {
    label,
    url,
    pid: child.pid!,
    child,
    async stop() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
