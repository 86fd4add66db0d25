// A chat-completions backend that answers with one real server's bytes (a "flavour":
// test/gateway/messages/flavours.ts, each shape read from the server's source), for
// `npm run bench:profile` with RC_PROFILE_FLAVOUR: the gateway measured on what vLLM, SGLang or
// llama.cpp send, not on the sim's shape. It answers as `rc sim --fast` does: a stream's head
// with its first event in one write, the rest with the chunked terminator in a second; a
// non-stream answer in one write with its length. `max_tokens` text tokens (20 by default), cut
// by max_tokens; stream_options honoured (include_usage, continuous_usage_stats). Everything else
// is a 404. Plain `net` and a minimal HTTP/1.1 reader: it runs natively beside the target under
// callgrind and only has to be cheap and exact.
//
// node dist/bench/profile/replay-backend.js --flavour vllm [--port 0]   prints {"url": ...}
import * as net from 'node:net';
import { completionBody, FLAVOURS, type Flavour, isFlavour, streamBody, textPlan } from '../../test/gateway/messages/flavours.js';

const CRLF2 = Buffer.from('\r\n\r\n');

interface ChatBody {
  stream?: boolean;
  max_tokens?: number;
  stream_options?: { include_usage?: boolean; continuous_usage_stats?: boolean } | null;
}

/** The server header each flavour's HTTP server sends (uvicorn for vLLM and SGLang, cpp-httplib for llama.cpp: none). */
function serverHeader(f: Flavour): string {
  return f === 'llama.cpp' ? '' : 'server: uvicorn\r\n';
}

/** The response bytes for one request: one or two writes. */
export function answer(f: Flavour, method: string, path: string, body: string): Buffer[] {
  if (method !== 'POST' || !path.startsWith('/v1/chat/completions')) {
    const b = '{"detail":"Not Found"}';
    return [Buffer.from(`HTTP/1.1 404 Not Found\r\n${serverHeader(f)}content-type: application/json\r\ncontent-length: ${b.length}\r\n\r\n${b}`)];
  }
  const req = JSON.parse(body) as ChatBody;
  const plan = textPlan(req.max_tokens ?? 20, {
    includeUsage: req.stream_options?.include_usage === true,
    continuousUsage: req.stream_options?.continuous_usage_stats === true,
  });
  if (!req.stream) {
    const b = Buffer.from(completionBody(f, plan));
    return [Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\n${serverHeader(f)}content-type: application/json\r\ncontent-length: ${b.length}\r\n\r\n`), b])];
  }
  const events = streamBody(f, plan);
  const first = events.indexOf('\n\n') + 2;
  const chunk = (s: string) => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;
  return [
    Buffer.from(
      `HTTP/1.1 200 OK\r\n${serverHeader(f)}content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n${chunk(events.slice(0, first))}`,
    ),
    Buffer.from(`${chunk(events.slice(first))}0\r\n\r\n`),
  ];
}

export interface ReplayBackend {
  url: string;
  /** Stops listening and ends the open connections (the gateway's pool keeps them alive). */
  close(): Promise<void>;
}

/** Serves `f` on `port` (0: any) at 127.0.0.1; resolves once it listens. */
export async function serveFlavour(f: Flavour, port = 0): Promise<ReplayBackend> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.setNoDelay(true);
    let pending: Buffer = Buffer.alloc(0);
    socket.on('data', (data: Buffer) => {
      pending = pending.length ? Buffer.concat([pending, data]) : data;
      for (;;) {
        const headEnd = pending.indexOf(CRLF2);
        if (headEnd < 0) return;
        const head = pending.toString('latin1', 0, headEnd);
        const length = Number(/\r\ncontent-length:[ \t]*(\d+)/i.exec(head)?.[1] ?? 0);
        const end = headEnd + 4 + length;
        if (pending.length < end) return;
        const [method = '', path = ''] = head.slice(0, head.indexOf('\r\n')).split(' ');
        const body = pending.toString('utf8', headEnd + 4, end);
        pending = pending.subarray(end);
        const [a, b] = answer(f, method, path, body);
        // Two sends in one turn, as the sim's two corked writes.
        socket.write(a!);
        if (b) socket.write(b);
      }
    });
    socket.on('error', () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const { port: bound } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${bound}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}

// As a program: the flavour from --flavour, the URL printed as rc sim prints it.
if (process.argv[1]?.endsWith('replay-backend.js')) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const f = arg('--flavour') ?? '';
  if (!isFlavour(f)) {
    process.stderr.write(`--flavour must be one of ${FLAVOURS.join(', ')}\n`);
    process.exit(2);
  }
  const backend = await serveFlavour(f, Number(arg('--port') ?? 0));
  process.stdout.write(`${JSON.stringify({ url: backend.url, flavour: f })}\n`);
  const stop = () => void backend.close().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
