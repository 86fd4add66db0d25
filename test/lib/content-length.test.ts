// Issue 14, "smaller": two different Content-Length headers. uWS frames the body by the first one
// and reads the rest as the next request on the connection: behind a proxy that framed by the
// other, a request smuggled in a body would be served. Attack: the body of a request carries a
// second request; the gateway and the platform API never serve it, answer 400 and close.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { startFixture } from '../gateway/fixture.js';
import { startPlatform } from '../control-plane/platform.js';

/** Writes raw bytes, collects everything until the server closes (or 3 s pass). */
function raw(url: string, bytes: string): Promise<{ text: string; closedByServer: boolean }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let text = '';
    let closedByServer = false;
    const socket = connect(Number(port), hostname, () => socket.write(bytes));
    const timer = setTimeout(() => socket.destroy(), 3000);
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('end', () => (closedByServer = true));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closedByServer });
    });
    socket.on('error', () => {});
  });
}

/** A POST whose first Content-Length covers `{}` and whose second covers a smuggled GET too. */
function smuggling(path: string, headers: string, smuggledPath: string): string {
  const smuggled = `GET ${smuggledPath} HTTP/1.1\r\nHost: x\r\n${headers}\r\n`;
  const body = `{}${smuggled}`;
  return `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}Content-Length: 2\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
}

const responses = (text: string) => text.split(/(?=HTTP\/1\.1 \d{3})/).filter(Boolean);

test('attack: a request smuggled behind a second Content-Length (gateway): never served, 400 when nothing follows', async (t) => {
  const f = await startFixture();
  t.after(() => f.close());
  const auth = `Authorization: Bearer ${f.key}\r\n`;
  const r = await raw(f.gateway.url, smuggling('/v1/chat/completions', auth, '/v1/models'));
  assert.ok(r.closedByServer);
  assert.ok(
    responses(r.text).every((x) => /^HTTP\/1\.1 400 /.test(x)),
    r.text,
  );
  assert.doesNotMatch(r.text, /"object":"list"/, 'the smuggled request was served');
  // Two lengths and nothing after: one 400 in the chat shape, then the connection closes.
  const alone = await raw(f.gateway.url, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}`);
  assert.match(alone.text, /^HTTP\/1\.1 400 /);
  assert.match(alone.text, /"message":"Conflicting Content-Length headers"/);
  assert.ok(alone.closedByServer);
  // Repeated equal headers are one length.
  const same = await raw(
    f.gateway.url,
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 2\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
  );
  assert.match(same.text, /^HTTP\/1\.1 400 /); // no model in the body
  assert.doesNotMatch(same.text, /Conflicting/);
});

test('attack: a request smuggled behind a second Content-Length (platform API): never served, 400 when nothing follows', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  const r = await raw(p.cp.url, smuggling('/api/auth/login', '', '/api/health'));
  assert.ok(r.closedByServer);
  assert.ok(
    responses(r.text).every((x) => /^HTTP\/1\.1 400 /.test(x)),
    r.text,
  );
  assert.doesNotMatch(r.text, /"status":"ok"/, 'the smuggled request was served');
  const alone = await raw(
    p.cp.url,
    'POST /api/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}',
  );
  assert.match(alone.text, /^HTTP\/1\.1 400 /);
  assert.match(alone.text, /"detail":"Conflicting Content-Length headers"/);
  assert.ok(alone.closedByServer);
});

test('the header-count limit (documented): 48 header lines are served, more get no reply', async (t) => {
  const f = await startFixture();
  t.after(() => f.close());
  const withHeaders = (n: number) => {
    const extra = Array.from({ length: n - 3 }, (_, i) => `X-Extra-${i}: v\r\n`).join('');
    return `GET /health HTTP/1.1\r\nHost: x\r\n${extra}Authorization: Bearer ${f.key}\r\nConnection: close\r\n\r\n`;
  };
  assert.match((await raw(f.gateway.url, withHeaders(48))).text, /^HTTP\/1\.1 200 /);
  const over = await raw(f.gateway.url, withHeaders(49));
  assert.equal(over.text, '', 'no reply (uWS keeps the connection until its idle timeout)');
});
