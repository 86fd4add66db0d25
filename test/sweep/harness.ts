// The bad-input sweep's shared setup: the whole platform in this process (as bin/platform.ts
// assembles it) on ephemeral ports, accounts with keys and sessions, a raw HTTP/1.1 client that
// sends exactly the bytes a case needs (lying Content-Length, odd paths, cut connections), and
// the body shapes SPEC.md gives each surface.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startPlatform, type Platform } from '../../bin/platform.js';
import { runAdminOp } from '../../control-plane/admin.js';
import { loadConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { killAgentProcesses } from '../agent/harness.js';
import { prng } from '../../sim/generate.js';
import { waitFor, platformTestEnv } from '../helpers.js';

export interface SweepPlatform {
  platform: Platform;
  dataDir: string;
  gateway: number;
  api: number;
  proxy: number;
  /** The tunnels' own listener (public tunnel URLs). */
  tunnels: number;
  /** A verified account's API key. */
  key: string;
  /** An unverified account's session: cookie pair and CSRF token. */
  unverified: { cookie: string; csrf: string };
  /** Creates an account through the admin operation (as `rc account create`). */
  account(email: string, o?: { verified?: boolean; credits?: number; password?: string }): Promise<{ id: number; api_token: string | null }>;
  /** Signs in with e-mail and password; the session cookie pair and CSRF token. */
  login(email: string, password: string): Promise<{ cookie: string; csrf: string }>;
  close(): Promise<void>;
}

export async function startSweepPlatform(extraEnv: Record<string, string> = {}): Promise<SweepPlatform> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-sweep-'));
  const config = loadConfig({
    ...platformTestEnv(dataDir),
    RC_AGENT_GPU_DETECT: 'configured',
    // The sweep sends thousands of requests from one address: the sign-in limits are tested apart
    // (test/control-plane/sign-in-attacks.test.ts), the coupon limits too (coupon-guessing.test.ts).
    RC_LOGIN_PER_ADDRESS_PER_MINUTE: '1000000',
    RC_SIGNUP_PER_ADDRESS_PER_HOUR: '1000000',
    RC_COUPON_ATTEMPTS_PER_ACCOUNT_PER_HOUR: '1000000',
    RC_COUPON_ATTEMPTS_PER_ADDRESS_PER_HOUR: '1000000',
    ...extraEnv,
  });
  const platform = await startPlatform(config, createLogger());
  const admin = { store: platform.controlPlane.store, publish: (e: never) => platform.bus.publish(e), configuredModels: config.models };
  const account = async (email: string, o: { verified?: boolean; credits?: number; password?: string } = {}) =>
    (await runAdminOp(admin, 'account.create', { email, ...o })) as { id: number; api_token: string | null };
  const api = platform.controlPlane.port;
  const login = async (email: string, password: string) => {
    const r = await request(api, 'POST', '/api/auth/login', { headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
    assert.equal(r.status, 200, r.body);
    const cookie = String(r.headers['set-cookie']).split(';')[0]!;
    return { cookie, csrf: (JSON.parse(r.body) as { csrf_token: string }).csrf_token };
  };
  const verified = await account('sweep@example.com', { verified: true, credits: 10 });
  const key = verified.api_token!;
  // The gateway learns keys from the bus: wait until it knows this one.
  await waitFor(async () => (await request(platform.gateway.port, 'GET', '/v1/models', { headers: { authorization: `Bearer ${key}` } })).status === 200);
  const signup = await request(api, 'POST', '/api/auth/signup', {
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'review@example.com', password: 'correct horse battery' }),
  });
  assert.equal(signup.status, 201, signup.body);
  const unverified = { cookie: String(signup.headers['set-cookie']).split(';')[0]!, csrf: (JSON.parse(signup.body) as { csrf_token: string }).csrf_token };
  return {
    platform,
    dataDir,
    gateway: platform.gateway.port,
    api,
    proxy: platform.proxy.port,
    tunnels: platform.tunnels.port,
    key,
    unverified,
    account,
    login,
    async close() {
      // Destroy what the sweep launched (a launch may still be starting), then stop the platform.
      await request(api, 'DELETE', '/api/notebook/current', { headers: { authorization: `Bearer ${key}` } });
      await waitFor(
        async () => {
          const st = await request(api, 'GET', '/api/notebook/status', { headers: { authorization: `Bearer ${key}` } });
          return st.status === 404 || ['stopped', 'failed'].includes((JSON.parse(st.body) as { status: string }).status);
        },
        30_000,
        50,
      );
      await platform.close();
      // The platform leaves instances running for the next start to adopt: a test kills them.
      killAgentProcesses(platform.agent.agentId);
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(`${dataDir}-instances`, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP/1.1 client

export interface RawReply {
  status: number;
  /** Lower-case names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: string;
}

export interface RequestOptions {
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Content-Length to declare: a number (which may lie), null for none; default the body's length when there is a body. */
  contentLength?: number | null;
  /** Send the body with Transfer-Encoding: chunked (in `chunks` pieces). */
  chunked?: boolean;
}

/** The bytes of one request. */
export function requestBytes(method: string, path: string, o: RequestOptions = {}): Buffer {
  const body = o.body === undefined ? undefined : Buffer.isBuffer(o.body) ? o.body : Buffer.from(o.body);
  // A Host of the caller's replaces the default (the tunnels' listener routes by it).
  const lines = [`${method} ${path} HTTP/1.1`];
  if (!Object.keys(o.headers ?? {}).some((k) => k.toLowerCase() === 'host')) lines.push('host: 127.0.0.1');
  for (const [k, v] of Object.entries(o.headers ?? {})) lines.push(`${k}: ${v}`);
  let payload = body ?? Buffer.alloc(0);
  if (o.chunked) {
    lines.push('transfer-encoding: chunked');
    const parts: Buffer[] = [];
    const size = Math.max(1, Math.ceil(payload.length / 3));
    for (let i = 0; i < payload.length; i += size) {
      const c = payload.subarray(i, i + size);
      parts.push(Buffer.from(`${c.length.toString(16)}\r\n`), c, Buffer.from('\r\n'));
    }
    parts.push(Buffer.from('0\r\n\r\n'));
    payload = Buffer.concat(parts);
  } else {
    const declared = o.contentLength === undefined ? body?.length : o.contentLength;
    if (declared !== undefined && declared !== null) lines.push(`content-length: ${declared}`);
  }
  return Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1'), payload]);
}

/** Incremental parser of one HTTP/1.1 response (Content-Length, chunked, or until close). */
class ResponseParser {
  private buf = Buffer.alloc(0);
  reply: RawReply | undefined;
  private bodyStart = -1;
  private framing: 'length' | 'chunked' | 'close' = 'close';
  private length = 0;
  /** Set once the head has been parsed. */
  head: { status: number; headers: Record<string, string> } | undefined;

  /** Feeds bytes; returns true once the whole response is in. */
  push(chunk: Buffer): boolean {
    this.buf = Buffer.concat([this.buf, chunk]);
    if (!this.head) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return false;
      const lines = this.buf.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!)?.[1] ?? 0);
      if (status >= 100 && status < 200) {
        // An interim response (100 Continue): the real one follows.
        this.buf = this.buf.subarray(end + 4);
        return this.push(Buffer.alloc(0));
      }
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        const k = l.slice(0, i).trim().toLowerCase();
        const v = l.slice(i + 1).trim();
        headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
      }
      this.head = { status, headers };
      this.bodyStart = end + 4;
      if (headers['transfer-encoding']?.toLowerCase().includes('chunked')) this.framing = 'chunked';
      else if (headers['content-length'] !== undefined) {
        this.framing = 'length';
        this.length = Number(headers['content-length']);
      } else if (status === 204 || status === 304) {
        this.framing = 'length';
        this.length = 0;
      }
    }
    return this.tryFinish();
  }

  private tryFinish(): boolean {
    const rest = this.buf.subarray(this.bodyStart);
    if (this.framing === 'length') {
      if (rest.length < this.length) return false;
      this.done(rest.subarray(0, this.length));
      return true;
    }
    if (this.framing === 'chunked') {
      const parts: Buffer[] = [];
      let i = 0;
      for (;;) {
        const eol = rest.indexOf('\r\n', i);
        if (eol < 0) return false;
        const size = parseInt(rest.subarray(i, eol).toString('latin1'), 16);
        if (size === 0) {
          if (rest.indexOf('\r\n', eol + 2) < 0) return false;
          this.done(Buffer.concat(parts));
          return true;
        }
        if (rest.length < eol + 2 + size + 2) return false;
        parts.push(rest.subarray(eol + 2, eol + 2 + size));
        i = eol + 2 + size + 2;
      }
    }
    return false;
  }

  /** The connection closed: a read-until-close body ends here. */
  closed(): void {
    if (this.head && !this.reply && this.framing === 'close') this.done(this.buf.subarray(this.bodyStart));
  }

  private done(body: Buffer): void {
    this.reply = { status: this.head!.status, headers: this.head!.headers, body: body.toString('utf8') };
  }
}

export interface ExchangeOptions {
  /** Half-close (FIN) after writing. */
  end?: boolean;
  /** Give up after this many ms (resolves with what arrived: often nothing). Default 10 s. */
  timeoutMs?: number;
  /** Called with the socket once the response head arrives (to disconnect mid-stream). */
  onHead?: (socket: Socket, head: { status: number; headers: Record<string, string> }) => void;
}

/**
 * Writes `parts` (each a separate write) and resolves with the first response, or undefined when
 * the server closed the connection (or the timeout passed) without a whole response.
 */
export function exchange(port: number, parts: Buffer[], o: ExchangeOptions = {}): Promise<RawReply | undefined> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const parser = new ResponseParser();
    let settled = false;
    const finish = (r: RawReply | undefined) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => finish(parser.reply), o.timeoutMs ?? 10_000);
    let headSeen = false;
    socket.on('data', (chunk: Buffer) => {
      if (parser.push(chunk)) finish(parser.reply);
      else if (!headSeen && parser.head) {
        headSeen = true;
        o.onHead?.(socket, parser.head);
      }
    });
    socket.on('close', () => {
      parser.closed();
      finish(parser.reply);
    });
    socket.on('error', () => finish(parser.reply));
    socket.on('connect', () => {
      for (const p of parts) socket.write(p);
      if (o.end) socket.end();
    });
  });
}

/** One ordinary request; rejects when no response arrives. */
export async function request(port: number, method: string, path: string, o: RequestOptions = {}): Promise<RawReply> {
  const r = await exchange(port, [requestBytes(method, path, o)]);
  if (!r) throw new Error(`no response to ${method} ${path.slice(0, 200)}`);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Body shapes (SPEC.md "Body shapes")

export type Shape = 'detail' | 'chat' | 'messages' | 'vllm';

function parse(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

const isText = (v: unknown): v is string => typeof v === 'string' && v.trim().length > 0;

/** Why `body` is not an error body of `shape`, or undefined when it is. */
export function shapeProblem(shape: Shape, body: string): string | undefined {
  const v = parse(body) as Record<string, unknown> | undefined;
  if (!v || typeof v !== 'object' || Array.isArray(v)) return 'not a JSON object';
  switch (shape) {
    case 'detail': {
      const d = v.detail;
      if (isText(d)) return undefined;
      // 403 account_not_verified: {detail: {code, message, redirect}}
      if (d && typeof d === 'object' && isText((d as Record<string, unknown>).code) && isText((d as Record<string, unknown>).message)) return undefined;
      return 'no detail string';
    }
    case 'chat': {
      const e = v.error as Record<string, unknown> | undefined;
      if (!e || typeof e !== 'object') return 'no error object';
      if (!isText(e.message) || !isText(e.type)) return 'error.message/type missing';
      if (!('param' in e) || !('code' in e)) return 'error.param/code missing';
      return undefined;
    }
    case 'messages': {
      const e = v.error as Record<string, unknown> | undefined;
      if (v.type !== 'error' || !e || !isText(e.type) || !isText(e.message)) return 'not {type: "error", error: {type, message}}';
      return undefined;
    }
    case 'vllm': {
      // vLLM 0.10.0's flat body, or the nested one of 0.10.1 and later (the sim's default speaks current vLLM).
      if (v.object === 'error' && isText(v.message) && isText(v.type)) return undefined;
      const e = v.error as Record<string, unknown> | undefined;
      if (e && typeof e === 'object' && isText(e.message) && isText(e.type) && typeof e.code === 'number') return undefined;
      if (isText(v.detail)) return undefined; // FastAPI's 404/405
      return 'not a vLLM error body';
    }
  }
}

export interface Expect {
  /** Allowed statuses; default any 4xx. */
  status?: number[];
  /** Shapes an error body may take (a route relaying a backend verbatim may answer in the backend's). */
  shapes: Shape[];
}

/** Asserts a reply answers a bad input: an allowed status, never 5xx, and an error body of the route's shape. */
export function assertRefused(label: string, r: RawReply | undefined, e: Expect): void {
  assert.ok(r, `${label}: no response (connection closed)`);
  assert.ok(r.status < 500, `${label}: ${r.status} ${r.body.slice(0, 300)}`);
  if (e.status) assert.ok(e.status.includes(r.status), `${label}: status ${r.status} not in ${e.status.join(',')}: ${r.body.slice(0, 300)}`);
  else assert.ok(r.status >= 400 && r.status < 500, `${label}: status ${r.status}, want 4xx: ${r.body.slice(0, 300)}`);
  if (r.status >= 400) {
    const problems = e.shapes.map((s) => shapeProblem(s, r.body));
    assert.ok(
      problems.some((p) => p === undefined),
      `${label}: ${r.status} body ${r.body.slice(0, 300)}: ${problems.join('; ')}`,
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Case generation (deterministic)

/** A small seeded generator, so generated cases are the same on every run: the sim's PRNG. */
export const seeded = prng;

/** JSON text of `n` nested arrays around 1. */
export const deepArrays = (n: number) => '['.repeat(n) + '1' + ']'.repeat(n);
/** JSON text of `n` nested objects. */
export const deepObjects = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);

/** Whole bodies that are not the JSON object a route wants. */
export const BAD_BODIES: readonly [string, string][] = [
  ['empty', ''],
  ['broken JSON', '{"model": '],
  ['trailing garbage', '{} x'],
  ['array', '[]'],
  ['array of objects', '[{"model":"sim-chat"}]'],
  ['string', '"hello"'],
  ['null', 'null'],
  ['number', '42'],
  ['true', 'true'],
  ['NaN literal', 'NaN'],
  ['whitespace', '   \n\t '],
  ['BOM then object', '\ufeff{}'],
  ['single quotes', "{'model': 'x'}"],
  ['NUL byte', '{"a":"\u0000"}\u0000'],
  ['prototype keys', '{"__proto__":{"admin":true},"constructor":{"prototype":{"x":1}}}'],
  ['duplicate keys', '{"a":1,"a":{"b":[]},"a":null}'],
  ['10k nested arrays', deepArrays(10_000)],
  ['10k nested objects', deepObjects(10_000)],
];

/** Values to put in place of a field: wrong types, odd numbers, long and odd strings, deep nesting. */
export const BAD_VALUES: readonly [string, string][] = [
  ['string', '"abc"'],
  ['empty string', '""'],
  ['number', '7'],
  ['negative', '-1'],
  ['zero', '0'],
  ['fraction', '1.5'],
  ['tiny', '1e-9'],
  ['negative zero', '-0'],
  ['huge', '1e308'],
  ['huge integer', '123456789012345678901234567890'],
  ['NaN string', '"NaN"'],
  ['Infinity string', '"Infinity"'],
  ['true', 'true'],
  ['null', 'null'],
  ['object', '{"x":1}'],
  ['empty object', '{}'],
  ['array', '[1,"a",null]'],
  ['empty array', '[]'],
  ['100k string', JSON.stringify('x'.repeat(100_000))],
  ['unicode and NUL', JSON.stringify('\u0000\u202e\ud83d\ude00\ud800 é \u0007')],
  ['lone surrogate escape', '"\\ud800"'],
  ['10k nested arrays', deepArrays(10_000)],
  ['10k nested objects', deepObjects(10_000)],
];

/** `base` (a JSON object) with `field` set to the JSON text `value`, or removed when value is undefined. */
export function withField(base: Record<string, unknown>, field: string, value: string | undefined): string {
  const rest = { ...base };
  delete rest[field];
  const inner = JSON.stringify(rest).slice(1, -1);
  if (value === undefined) return `{${inner}}`;
  return `{${inner}${inner ? ',' : ''}${JSON.stringify(field)}:${value}}`;
}

/** Bytes that are not valid UTF-8 inside a JSON string. */
export function invalidUtf8Json(base: Record<string, unknown>, field: string): Buffer {
  const [head, tail] = withField(base, field, '"@@"').split('@@') as [string, string];
  return Buffer.concat([Buffer.from(head), Buffer.from([0xc3, 0x28, 0xff, 0xfe, 0xed, 0xa0, 0x80]), Buffer.from(tail)]);
}

/** Runs cases and collects every failure, so one run reports all of them. */
export class Failures {
  readonly list: string[] = [];
  async check(label: string, fn: () => Promise<void> | void): Promise<void> {
    try {
      await fn();
    } catch (err) {
      this.list.push(err instanceof assert.AssertionError ? err.message.split('\n')[0]! : `${label}: ${(err as Error).message}`);
    }
  }
  /** Fails with every collected failure, one per line. */
  assertNone(): void {
    assert.equal(this.list.length, 0, `${this.list.length} failing case(s):\n${this.list.join('\n')}`);
  }
}
