// Readiness: an instance is ready when its main port accepts TCP connections and, for serving
// stacks (vllm, sglang), GET /health answers 200 (GET /v1/models when /health is 404).
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { probeGet } from '../lib/probe-http.js';

/** Instance types whose readiness also needs an HTTP health answer. */
export const SERVING_TYPES: ReadonlySet<string> = new Set(['vllm', 'sglang']);

export type ReadyResult = { ok: true } | { ok: false; aborted: boolean; detail: string };

export interface ReadyCheck {
  host: string;
  port: number;
  http: boolean;
  timeoutMs: number;
  signal: AbortSignal;
  /** Called once when the port first accepts a connection (before the HTTP check). */
  onPortOpen?: () => void;
}

function tcpOpen(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

async function httpStatus(url: string, timeoutMs: number): Promise<number | string> {
  try {
    // Our own client, not the global dispatcher: it forgets the instance's origin once it is gone (lib/probe-http.ts).
    return (await probeGet(url, timeoutMs)).status;
  } catch (err) {
    return (err as Error).message;
  }
}

export async function waitReady(check: ReadyCheck): Promise<ReadyResult> {
  const deadline = Date.now() + check.timeoutMs;
  let portOpen = false;
  let lastHttp: number | string | undefined;
  const base = `http://${check.host.includes(':') ? `[${check.host}]` : check.host}:${check.port}`;
  while (!check.signal.aborted) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    if (!portOpen && (await tcpOpen(check.host, check.port, Math.min(1000, left)))) {
      portOpen = true;
      check.onPortOpen?.();
    }
    if (portOpen) {
      if (!check.http) return { ok: true };
      lastHttp = await httpStatus(`${base}/health`, Math.min(5000, Math.max(1, deadline - Date.now())));
      if (lastHttp === 404) lastHttp = await httpStatus(`${base}/v1/models`, Math.min(5000, Math.max(1, deadline - Date.now())));
      if (lastHttp === 200) return { ok: true };
    }
    await sleep(Math.min(200, Math.max(1, deadline - Date.now())), undefined, { signal: check.signal }).catch(() => {});
  }
  if (check.signal.aborted) return { ok: false, aborted: true, detail: 'aborted' };
  const seconds = Math.round(check.timeoutMs / 100) / 10;
  const detail = !portOpen
    ? `Port ${check.port} did not accept connections within ${seconds} s`
    : `GET /health did not answer 200 within ${seconds} s (last: ${typeof lastHttp === 'number' ? `status ${lastHttp}` : (lastHttp ?? 'no answer')})`;
  return { ok: false, aborted: false, detail };
}
