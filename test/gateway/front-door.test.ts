// The front door reads its headers in one walk (request/front-door.ts): the first value of a
// repeated header counts, as uWS's getHeader gives it; Bearer wins over x-api-key; an empty first
// Content-Length is no length; x-rc-fit-max-tokens is read with the rest.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { type Fixture, startFixture } from './fixture.js';

/** Sends raw bytes (ending with Connection: close), returns what came back. */
function raw(url: string, bytes: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let text = '';
    const socket = connect(Number(port), hostname, () => socket.write(bytes));
    const timer = setTimeout(() => socket.destroy(), 5000);
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(text);
    });
    socket.on('error', () => {});
  });
}

const BODY = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });

function chat(headers: string, body = BODY): string {
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

describe('front door headers', () => {
  let f: Fixture;
  before(async () => {
    f = await startFixture();
  });
  after(() => f.close());

  it('takes the first Authorization of two, and Bearer over x-api-key', async () => {
    const good = `Bearer ${f.key}`;
    assert.match(await raw(f.gateway.url, chat(`Authorization: ${good}\r\nAuthorization: Bearer rc-nope\r\n`)), /^HTTP\/1\.1 200 /);
    assert.match(await raw(f.gateway.url, chat(`Authorization: Bearer rc-nope\r\nAuthorization: ${good}\r\n`)), /^HTTP\/1\.1 401 /);
    assert.match(await raw(f.gateway.url, chat(`x-api-key: ${f.key}\r\n`)), /^HTTP\/1\.1 200 /);
    assert.match(await raw(f.gateway.url, chat(`x-api-key: rc-nope\r\nx-api-key: ${f.key}\r\n`)), /^HTTP\/1\.1 401 /);
    assert.match(await raw(f.gateway.url, chat(`x-api-key: ${f.key}\r\nAuthorization: Bearer rc-nope\r\n`)), /^HTTP\/1\.1 401 /, 'Bearer wins');
    assert.match(await raw(f.gateway.url, chat('')), /^HTTP\/1\.1 401 /);
  });

  it('reads x-rc-fit-max-tokens with the other headers (its first value)', async () => {
    // max_tokens past the context: fitting on lowers it (200), off passes the backend's own 400.
    const long = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'word '.repeat(20) }], max_tokens: 1_000_000 });
    const auth = `Authorization: Bearer ${f.key}\r\n`;
    assert.match(await raw(f.gateway.url, chat(`${auth}x-rc-fit-max-tokens: 1\r\nx-rc-fit-max-tokens: 0\r\n`, long)), /^HTTP\/1\.1 200 /);
    assert.match(await raw(f.gateway.url, chat(`${auth}x-rc-fit-max-tokens: 0\r\nx-rc-fit-max-tokens: 1\r\n`, long)), /^HTTP\/1\.1 400 /);
  });
});
