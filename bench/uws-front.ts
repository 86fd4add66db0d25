// The front alone, for the benchmarks only (issue 16): uWebSockets.js with a JS handler that
// answers every POST itself, with no backend exchange at all. The first request of each body
// length is relayed to the backend once (fetch) and its answer kept; every later request of that
// length is answered from memory with the same status, content type and bytes. What this row
// costs is what uWS, V8 and one JS handler cost per request, the part of a relay that no gateway
// on uWebSockets.js can go below; the floor relay's distance to it is the backend exchange done
// in JS (bench/floor-relay.ts), nginx's distance to it the whole C relay.
//
// The benchmark workloads send fixed bodies of distinct lengths per workload (non-stream and
// stream requests differ by `"stream":true`), so the length alone tells them apart. A cached
// stream is sent in one write, as the unpaced sim sends it; paced streams are not its business.
//
//   node dist/bench/uws-front.js <backend URL>     prints {"url": ...} once listening
import { uws } from '../lib/uws.js';
import type { HttpResponse } from '../lib/uws.js';

const backend = new URL(process.argv[2] ?? 'http://127.0.0.1:8000');

interface Answer {
  status: string;
  type: string;
  body: Buffer;
}

/** Answers by request body length; a pending fetch is shared by requests that arrive meanwhile. */
const answers = new Map<number, Answer | Promise<Answer>>();

async function fetchAnswer(path: string, body: Buffer): Promise<Answer> {
  const r = await fetch(new URL(path, backend), { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: String(r.status), type: r.headers.get('content-type') ?? 'application/json', body: Buffer.from(await r.arrayBuffer()) };
}

const app = uws().App();
app.post('/*', (res, req) => {
  const path = req.getUrl();
  const state = { aborted: false };
  res.onAborted(() => {
    state.aborted = true;
  });
  const parts: Buffer[] = [];
  res.onData((chunk, last) => {
    // A body in one piece whose answer is known (every request after the first): no copy at all.
    if (last && parts.length === 0) {
      const known = answers.get(chunk.byteLength);
      if (known !== undefined && !(known instanceof Promise)) {
        send(res, state, known);
        return;
      }
    }
    parts.push(Buffer.from(chunk.slice(0)));
    if (!last) return;
    const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    let a = answers.get(body.length);
    if (a === undefined) {
      a = fetchAnswer(path, body);
      answers.set(body.length, a);
      a.then((done) => answers.set(body.length, done)).catch(() => answers.delete(body.length));
    }
    if (a instanceof Promise) {
      a.then(
        (done) => send(res, state, done),
        () => {
          if (!state.aborted) res.cork(() => res.writeStatus('502 Bad Gateway').end());
        },
      );
    } else send(res, state, a);
  });
});

function send(res: HttpResponse, state: { aborted: boolean }, a: Answer): void {
  if (state.aborted) return;
  res.cork(() => {
    res.writeStatus(a.status).writeHeader('content-type', a.type).end(a.body);
  });
}

app.listen('127.0.0.1', 0, (listenSocket) => {
  if (!listenSocket) process.exit(1);
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${uws().us_socket_local_port(listenSocket)}` })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
