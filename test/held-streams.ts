// What the held-response tests share (issue 44; lib/held-limits.ts): a backend that holds every
// response open after its first bytes until the test ends it (normally, or by breaking off), and a
// client that opens a request from a chosen local address, reads its head and can go away.
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { waitFor } from './helpers.js';

/** One response the backend holds open. */
export interface HeldResponse {
  path: string;
  body: string;
  res: ServerResponse;
}

export interface HeldBackend {
  url: string;
  /** The responses it holds open now, oldest first. */
  held: HeldResponse[];
  /** Ends the oldest held response normally (its last event, then [DONE]). */
  endOne(): void;
  /** Breaks off the oldest held response (the socket destroyed mid-stream: a backend error). */
  breakOne(): void;
  close(): Promise<void>;
}

/** A chat-completions chunk as vLLM writes it (content `text`). */
export function chatChunk(text: string, finish: string | null = null): string {
  return `data: ${JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1764300000,
    model: 'm',
    choices: [{ index: 0, delta: { role: 'assistant', content: text }, logprobs: null, finish_reason: finish }],
  })}\n\n`;
}

const USAGE_CHUNK = `data: ${JSON.stringify({
  id: 'chatcmpl-1',
  object: 'chat.completion.chunk',
  created: 1764300000,
  model: 'm',
  choices: [],
  usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
})}\n\n`;

const WHOLE = JSON.stringify({
  id: 'chatcmpl-2',
  object: 'chat.completion',
  created: 1764300000,
  model: 'm',
  choices: [{ index: 0, message: { role: 'assistant', content: 'whole' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
});

/**
 * A backend that answers a request whose body asks for a stream with an SSE head and one chunk,
 * then holds it open; any other POST gets a whole chat completion at once.
 */
export async function heldBackend(): Promise<HeldBackend> {
  const held: HeldResponse[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      if (!/"stream"\s*:\s*true/.test(body)) {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(WHOLE)) }).end(WHOLE);
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chatChunk('first'));
      const h: HeldResponse = { path: req.url ?? '', body, res };
      held.push(h);
      res.on('close', () => {
        const i = held.indexOf(h);
        if (i >= 0) held.splice(i, 1);
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    held,
    endOne() {
      const h = held.shift();
      h?.res.end(chatChunk('', 'stop') + USAGE_CHUNK + 'data: [DONE]\n\n');
    },
    breakOne() {
      const h = held.shift();
      h?.res.socket?.destroy();
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A request in flight from the test's side. */
export interface OpenRequest {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The body so far. */
  text: string;
  ended: boolean;
  /** Goes away (the socket destroyed). */
  abort(): void;
}

/**
 * POSTs `body` (JSON; undefined: a GET) to `url` from `localAddress` and resolves once the
 * response head and its first bytes arrived (or the whole body, when it is short and ends).
 */
export async function openRequest(url: string, body: unknown, headers: Record<string, string>, localAddress = '127.0.0.1'): Promise<OpenRequest> {
  const data = body === undefined ? '' : JSON.stringify(body);
  const out: OpenRequest = { status: 0, headers: {}, text: '', ended: false, abort: () => {} };
  const req = request(url, {
    method: body === undefined ? 'GET' : 'POST',
    localAddress,
    agent: false,
    headers: body === undefined ? headers : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(data)), ...headers },
  });
  out.abort = () => req.destroy();
  req.on('error', () => {});
  req.on('response', (res) => {
    out.status = res.statusCode ?? 0;
    out.headers = res.headers;
    res.setEncoding('utf8');
    res.on('data', (d: string) => (out.text += d));
    res.on('end', () => (out.ended = true));
    res.on('error', () => {});
  });
  req.end(data);
  await waitFor(() => out.ended || out.text.length > 0, 15_000);
  return out;
}
