// A small real HTTP backend (node:http) for the gateway's tests that answers each `METHOD /path`
// with the bytes a test gives (taken from a real server's source: backend-bytes.ts), and records
// what it was asked.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Answer {
  status?: number;
  headers?: Record<string, string>;
  body: string;
}

/** What a route answers: fixed bytes, or bytes made from the request's body. */
export type Route = Answer | ((body: string) => Answer);

export interface ScriptedBackend {
  url: string;
  /** Requests received per `METHOD /path`, in order (their bodies). */
  asked: Map<string, string[]>;
  /** How many times `key` (`METHOD /path`) was asked. */
  count(key: string): number;
  /** The body of the last request to `key`, parsed. */
  last(key: string): any;
  /** Replaces or adds routes. */
  routes: Record<string, Route>;
  close(): Promise<void>;
}

/** A backend answering `routes` (`'POST /v1/chat/completions'`, ...); anything else: FastAPI's 404. */
export async function scriptedBackend(routes: Record<string, Route>): Promise<ScriptedBackend> {
  const asked = new Map<string, string[]>();
  const self: ScriptedBackend = {
    url: '',
    asked,
    routes,
    count: (key) => asked.get(key)?.length ?? 0,
    last: (key) => {
      const all = asked.get(key);
      return all?.length ? JSON.parse(all[all.length - 1]!) : undefined;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  const server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      const key = `${req.method} ${req.url}`;
      let list = asked.get(key);
      if (!list) asked.set(key, (list = []));
      list.push(body);
      const route = self.routes[key];
      const a: Answer = route === undefined ? { status: 404, body: '{"detail":"Not Found"}' } : typeof route === 'function' ? route(body) : route;
      res.writeHead(a.status ?? 200, { 'content-type': 'application/json', ...a.headers }).end(a.body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  self.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const close = self.close;
  self.close = () => {
    server.closeAllConnections();
    return close();
  };
  return self;
}
