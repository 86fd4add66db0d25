// Shared setup of the control-plane suites: a real control plane on an ephemeral port with a
// real SQLite file in a temp dir, a bus whose events are recorded, and a small JSON client.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { MemoryBus, type Bus, type BusEvent } from '../../lib/bus.js';
import { createControlPlane, type ControlPlane, type ControlPlaneOptions } from '../../control-plane/server.js';
import { runAdminOp } from '../../control-plane/admin.js';
import { DEFAULT_SIM_MODELS } from '../../lib/config.js';

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface CallOptions {
  body?: unknown;
  /** A raw body (string or Buffer) sent as is. */
  raw?: string | Buffer;
  key?: string;
  cookie?: string;
  csrf?: string;
  headers?: Record<string, string>;
}

export interface Platform {
  cp: ControlPlane;
  dir: string;
  bus: Bus;
  events: BusEvent[];
  call(method: string, path: string, o?: CallOptions): Promise<Reply>;
  /** Creates an account through the admin operation (as `rc account create` does). */
  account(
    email: string,
    o?: { verified?: boolean; editor?: boolean; operator?: boolean; credits?: number; password?: string },
  ): Promise<{ id: number; email: string; api_token: string | null }>;
  close(): Promise<void>;
}

export async function startPlatform(options: Partial<ControlPlaneOptions> = {}): Promise<Platform> {
  // A data dir of its own unless the caller gives one (then the caller's to remove).
  const own = options.dataDir === undefined;
  const dir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'rc-cp-test-'));
  const bus = options.bus ?? new MemoryBus();
  const events: BusEvent[] = [];
  const unsubscribe = bus.subscribe((e) => events.push(e));
  const cp = await createControlPlane({ ...options, dataDir: dir, bus, port: 0 });
  return {
    cp,
    dir,
    bus,
    events,
    async call(method, path, o = {}) {
      const headers: Record<string, string> = { ...o.headers };
      if (o.key !== undefined) headers.authorization = `Bearer ${o.key}`;
      if (o.cookie !== undefined) headers.cookie = o.cookie;
      if (o.csrf !== undefined) headers['x-csrf-token'] = o.csrf;
      let body: string | Buffer | undefined = o.raw;
      if (o.body !== undefined) {
        body = JSON.stringify(o.body);
        headers['content-type'] ??= 'application/json';
      }
      const r = await request(cp.url + path, { method: method as 'GET', headers, body });
      const text = await r.body.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        /* keep text */
      }
      return { status: r.statusCode, headers: r.headers, body: parsed };
    },
    async account(email, o = {}) {
      return (await runAdminOp({ store: cp.store, publish: (e) => bus.publish(e), configuredModels: DEFAULT_SIM_MODELS }, 'account.create', {
        email,
        ...o,
      })) as {
        id: number;
        email: string;
        api_token: string | null;
      };
    },
    async close() {
      unsubscribe();
      await cp.close();
      if (own) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The `rc_session=...` pair of a Set-Cookie header, for sending back as Cookie. */
export function sessionCookieOf(r: Reply): string {
  const h = r.headers['set-cookie'];
  const line = Array.isArray(h) ? h[0]! : h!;
  return line.split(';')[0]!;
}

/** A well-formed SSH public key line of `type` (with a key blob that embeds the type). */
export function sshKey(type: string, comment = 'me@laptop', embedded = type): string {
  const t = Buffer.from(embedded);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(t.length);
  const material = Buffer.alloc(36, 7);
  return `${type} ${Buffer.concat([len, t, material]).toString('base64')}${comment ? ' ' + comment : ''}`;
}
