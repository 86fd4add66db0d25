// The one response writer, through ResponseRelay (the verbatim relay of dedicated endpoints,
// the instance proxy and tunnels) on a real uWS server: hop-by-hop headers are never relayed,
// a route's own header filter drops what it names (the seam for keeping instance cookies off the
// platform's origin), a whole body keeps its Content-Length, a streamed one is chunked, HEAD has
// no body, and the route's onFinish runs exactly once however the response ends.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { listen, track } from '../../../lib/http.js';
import { uws } from '../../../lib/uws.js';
import { ResponseRelay } from '../../../lib/relay/forward.js';
import { connect } from 'node:net';
import { headerNameIs, isHopByHop, ResponseWriter, type HeaderName } from '../../../lib/relay/response-writer.js';

const SET_COOKIE = Buffer.from('set-cookie');
const dropCookies = (name: HeaderName): boolean => headerNameIs(name, SET_COOKIE);

const BACKEND_HEADERS = [
  'Content-Type',
  'text/plain',
  'Set-Cookie',
  'rc_session=stolen',
  'Connection',
  'keep-alive',
  'Keep-Alive',
  'timeout=5',
  'Date',
  'x',
  'X-Kept',
  '1',
];

test('the writer relays the head minus hop-by-hop and filtered headers, once, in every ending', async (t) => {
  const finished: string[] = [];
  const app = uws().App();
  const route = (path: string, run: (relay: ResponseRelay) => void, filter = true) => {
    app.any(path, (res, req) => {
      const method = req.getCaseSensitiveMethod().toUpperCase();
      const relay = new ResponseRelay(track(res), method, (status) => finished.push(`${path} ${status}`), filter ? dropCookies : undefined);
      // The source answers later, as a backend does.
      setTimeout(() => run(relay), 5);
    });
  };
  route('/whole', (r) => {
    r.head(200, [...BACKEND_HEADERS, 'Content-Length', '5']);
    r.data(Buffer.from('hello'));
    r.end();
    r.fail(502, 'late failure'); // after the end: ignored, onFinish already ran
  });
  route('/streamed', (r) => {
    r.head(200, BACKEND_HEADERS);
    r.data(Buffer.from('a'));
    setTimeout(() => {
      r.data(Buffer.from('b'));
      r.end();
    }, 5);
  });
  route(
    '/unfiltered',
    (r) => {
      r.head(200, [...BACKEND_HEADERS, 'Set-Cookie', 'app=1']);
      r.end();
    },
    false,
  );
  route('/head', (r) => {
    r.head(200, [...BACKEND_HEADERS, 'Content-Length', '42']);
    r.end();
  });
  route('/failed', (r) => r.fail(504, 'The instance did not answer in time'));
  const server = await listen(app, '127.0.0.1', 0);
  t.after(() => server.close());

  const whole = await fetch(`${server.url}/whole`);
  assert.equal(await whole.text(), 'hello');
  assert.equal(whole.headers.get('content-length'), '5');
  assert.equal(whole.headers.get('set-cookie'), null, 'the route filter dropped Set-Cookie');
  assert.equal(whole.headers.get('x-kept'), '1');
  assert.equal(whole.headers.get('keep-alive'), null);
  assert.notEqual(whole.headers.get('date'), 'x', "Date is uWS's own");

  const streamed = await fetch(`${server.url}/streamed`);
  assert.equal(await streamed.text(), 'ab');
  assert.equal(streamed.headers.get('transfer-encoding'), 'chunked');
  assert.equal(streamed.headers.get('set-cookie'), null);

  const unfiltered = await fetch(`${server.url}/unfiltered`);
  await unfiltered.text();
  // Without a route filter only hop-by-hop headers go, and an instance's platform cookie
  // (lib/instance-credentials.ts: no instance sets or clears rc_*); the app's own cookie passes.
  assert.equal(unfiltered.headers.get('set-cookie'), 'app=1');

  const head = await fetch(`${server.url}/head`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-length'), '42');

  const failed = await fetch(`${server.url}/failed`);
  assert.equal(failed.status, 504);
  assert.deepEqual(await failed.json(), { detail: 'The instance did not answer in time' });

  assert.deepEqual(finished.sort(), ['/failed 504', '/head 200', '/streamed 200', '/unfiltered 200', '/whole 200']);
});

test('isHopByHop: framing, Date and uWS mark in any case, as Buffer or string; nothing else', () => {
  for (const h of ['Connection', 'keep-alive', 'CONTENT-LENGTH', 'transfer-encoding', 'date', 'uwebsockets', 'Proxy-Connection']) {
    assert.ok(isHopByHop(h), h);
    assert.ok(isHopByHop(Buffer.from(h)), h);
  }
  for (const h of ['content-type', 'set-cookie', 'x-date', 'dates', 'connections']) assert.ok(!isHopByHop(h), h);
});

test("the route's own headers (the gate's) arrive as separate header lines, in order, after the relayed ones", async (t) => {
  const app = uws().App();
  const extra = { 'x-ratelimit-limit-requests': '60', 'x-ratelimit-remaining-requests': '59', 'x-ratelimit-reset-tokens': '1m0s' };
  const heads: Record<string, HeaderName[]> = {
    // Our own names and values as strings.
    '/strings': ['Content-Type', 'application/json'],
    // A backend's, as bytes; the last relayed one is not the last in the list (a hop-by-hop one follows).
    '/bytes': ['content-type', 'text/plain', 'x-backend', 'b\u00e9', 'Connection', 'keep-alive'].map((v) => Buffer.from(v, 'latin1')),
    // Nothing relayed: the gate's line alone.
    '/alone': [],
  };
  for (const [path, raw] of Object.entries(heads)) {
    app.get(path, (res) => {
      const w = new ResponseWriter(track(res), { onAbort() {}, onDrain() {}, onFinish() {} });
      w.head(200, raw, extra);
      w.end(Buffer.from('{}'));
    });
  }
  const server = await listen(app, '127.0.0.1', 0);
  t.after(() => server.close());

  const r = await fetch(`${server.url}/strings`);
  assert.equal(await r.text(), '{}');
  for (const [k, v] of Object.entries(extra)) assert.equal(r.headers.get(k), v, k);
  // On the wire: one `name: value` line each, between the relayed headers and uWS's own.
  const headLines = (path: string) =>
    new Promise<string[]>((resolve, reject) => {
      const s = connect(server.port, '127.0.0.1', () => s.end(`GET ${path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`));
      let text = '';
      s.setEncoding('latin1');
      s.on('data', (d: string) => {
        text += d;
      });
      s.on('end', () => resolve(text.slice(0, text.indexOf('\r\n\r\n')).split('\r\n')));
      s.on('error', reject);
    });
  const own = ['x-ratelimit-limit-requests: 60', 'x-ratelimit-remaining-requests: 59', 'x-ratelimit-reset-tokens: 1m0s'];
  assert.deepEqual((await headLines('/strings')).slice(1, 5), ['Content-Type: application/json', ...own]);
  const bytes = await headLines('/bytes');
  assert.deepEqual(bytes.slice(1, 6), ['content-type: text/plain', 'x-backend: b\u00e9', ...own]);
  assert.ok(!bytes.some((l) => /^connection: keep-alive$/i.test(l)), 'the hop-by-hop line is not relayed');
  assert.deepEqual((await headLines('/alone')).slice(1, 4), own);
});
