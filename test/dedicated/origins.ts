// Clients for the instance proxy's per-instance origins (`<id>.localhost:<port>`): browsers resolve
// `*.localhost` to loopback, Node's resolver does not, so these connect to 127.0.0.1 whatever the
// host name, and send it as Host as a browser would.
import type { LookupFunction } from 'node:net';
import { Agent, fetch, request, type RequestInit, type Response } from 'undici';

export const loopbackLookup: LookupFunction = (_hostname, options, callback) => {
  if ((options as { all?: boolean }).all)
    (callback as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [{ address: '127.0.0.1', family: 4 }]);
  else callback(null, '127.0.0.1', 4);
};

const agent = new Agent({ connect: { lookup: loopbackLookup } });

/** fetch() that reaches `http://<anything>.localhost:<port>/` on 127.0.0.1; redirects are not followed. */
export function fetchLoopback(url: string, init: RequestInit = {}): Promise<Response> {
  return fetch(url, { redirect: 'manual', ...init, dispatcher: agent });
}

/** A plain request (no headers added, unlike fetch's Sec-Fetch-Mode) to `<anything>.localhost:<port>` on 127.0.0.1: its status. */
export async function statusLoopback(url: string, headers: Record<string, string>, method: 'GET' | 'POST' = 'GET'): Promise<number> {
  const r = await request(url, { method, headers, dispatcher: agent });
  await r.body.dump();
  return r.statusCode;
}
