// The gateway's HTTP/1.1 client (lib/relay/http-pool.ts) against real sockets: scripted raw TCP
// servers write exactly the bytes each case needs (split heads, chunk extensions, trailers,
// early closes, garbage), so every framing and failure path is exercised for real.
import { createServer as createHttpsServer } from 'node:https';
import { createServer, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { HttpPool, PoolError, type HttpPoolOptions, type ResponseHandler } from '../../../lib/relay/http-pool.js';
import { localhostCertificate, waitFor } from '../../helpers.js';
import { rawServer } from '../../gateway/raw-server.js';

interface Collected {
  status: number;
  headers: Record<string, string>;
  rawHeaders: string[];
  body: Buffer;
  chunks: number;
}

/** Sends one request and collects the response; rejects with the PoolError. */
function fetchVia(pool: HttpPool, body: Buffer | string = '{"x":1}', path = '/v1/chat/completions', handler?: Partial<ResponseHandler>): Promise<Collected> {
  return new Promise((resolve, reject) => {
    const out: Collected = { status: 0, headers: {}, rawHeaders: [], body: Buffer.alloc(0), chunks: 0 };
    const parts: Buffer[] = [];
    pool.request(path, body, {
      onHead(status, lines) {
        const raw = lines.all();
        out.status = status;
        out.rawHeaders = raw.map((b) => b.toString('latin1'));
        for (let i = 0; i < raw.length; i += 2) out.headers[raw[i]!.toString('latin1').toLowerCase()] = raw[i + 1]!.toString('latin1');
        handler?.onHead?.(status, lines);
      },
      onData(chunk) {
        parts.push(chunk);
        out.chunks++;
        return handler?.onData ? handler.onData(chunk) : true;
      },
      onEnd() {
        out.body = Buffer.concat(parts);
        resolve(out);
      },
      onError: reject,
    });
  });
}

// reuseAfterMs 0: these cases count connections, and reuse one at once (the rest before reuse has its own case).
const OPTIONS: HttpPoolOptions = {
  connections: 8,
  connectTimeoutMs: 2000,
  headersTimeoutMs: 5000,
  bodyTimeoutMs: 5000,
  keepAliveTimeoutMs: 30_000,
  reuseAfterMs: 0,
};
const pools: HttpPool[] = [];
function poolFor(url: string, o: Partial<HttpPoolOptions> = {}): HttpPool {
  const p = new HttpPool(url, { ...OPTIONS, ...o });
  pools.push(p);
  return p;
}
after(async () => {
  await Promise.all(pools.map((p) => p.destroy()));
});

const ok = (body: string, extra = '') =>
  `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

/** Writes `text` one byte at a time (each byte its own TCP segment, read separately). */
async function dribble(socket: Socket, text: string): Promise<void> {
  for (const byte of Buffer.from(text)) {
    socket.write(Buffer.from([byte]));
    await new Promise((r) => setTimeout(r, 1));
  }
}

describe('gateway http-pool', () => {
  it('sends one POST per request and reuses the kept-alive connection', async () => {
    const srv = await rawServer((r) => r.socket.write(ok(`{"n":${r.index}}`)));
    try {
      const pool = poolFor(srv.url + '/');
      const a = await fetchVia(pool, Buffer.from('{"a":1}'));
      const b = await fetchVia(pool, '{"b":"héllo"}', '/tokenize');
      assert.equal(a.status, 200);
      assert.equal(a.body.toString(), '{"n":0}');
      assert.equal(b.body.toString(), '{"n":1}');
      assert.equal(srv.connections(), 1, 'the second request went on the same connection');
      const [r0, r1] = srv.requests;
      assert.match(r0!.head, /^POST \/v1\/chat\/completions HTTP\/1\.1\r\n/);
      assert.match(r0!.head, new RegExp(`\\r\\nhost: 127\\.0\\.0\\.1:${srv.port}\\r\\n`, 'i'));
      assert.match(r0!.head, /\r\ncontent-type: application\/json\r\n/i);
      assert.equal(r0!.body.toString(), '{"a":1}');
      assert.match(r1!.head, /^POST \/tokenize HTTP\/1\.1/);
      assert.equal(r1!.body.toString(), '{"b":"héllo"}', 'a string body is sent as UTF-8 with its byte length');
      assert.deepEqual(a.rawHeaders.slice(0, 2), ['content-type', 'application/json']);
      assert.equal(pool.stats.running, 0);
      assert.equal(pool.stats.free, 1);
    } finally {
      await srv.close();
    }
  });

  it("writes each Buffer body's length right, from one digit to five, on heads kept per path", async () => {
    const srv = await rawServer((r) => r.socket.write(ok('{}')));
    try {
      const pool = poolFor(srv.url);
      const sizes = [0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10_000, 65_536];
      for (const [i, n] of sizes.entries()) await fetchVia(pool, Buffer.alloc(n, 0x61 + (i % 26)), i % 2 === 0 ? '/v1/chat/completions' : '/tokenize');
      for (const [i, n] of sizes.entries()) {
        const r = srv.requests[i]!;
        assert.match(r.head, new RegExp(`\\r\\ncontent-length: ${n}(\\r\\n|$)`, 'i'), `body of ${n}`);
        assert.match(r.head, i % 2 === 0 ? /^POST \/v1\/chat\/completions / : /^POST \/tokenize /);
        assert.ok(r.body.equals(Buffer.alloc(n, 0x61 + (i % 26))), `body of ${n}`);
      }
    } finally {
      await srv.close();
    }
  });

  it('sends a large body whole', async () => {
    const srv = await rawServer((r) => r.socket.write(ok(`{"len":${r.body.length}}`)));
    try {
      const big = Buffer.alloc(300_000, 0x61);
      const res = await fetchVia(poolFor(srv.url), big);
      assert.equal(res.body.toString(), '{"len":300000}');
      assert.ok(srv.requests[0]!.body.equals(big));
    } finally {
      await srv.close();
    }
  });

  it('parses heads and chunked bodies split at every byte, with extensions and trailers', async () => {
    const response =
      'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n' +
      '6;ext=1\r\ndata: \r\n' +
      'A\r\n0123456789\r\n' +
      '0\r\nx-trailer: yes\r\n\r\n';
    const srv = await rawServer((r) => {
      void dribble(r.socket, response);
    });
    try {
      const pool = poolFor(srv.url);
      const res = await fetchVia(pool);
      assert.equal(res.status, 200);
      assert.equal(res.headers['content-type'], 'text/event-stream');
      assert.equal(res.body.toString(), 'data: 0123456789');
      // The connection is clean after the trailers: it serves the next request.
      const again = await fetchVia(pool);
      assert.equal(again.body.toString(), 'data: 0123456789');
      assert.equal(srv.connections(), 1);
    } finally {
      await srv.close();
    }
  });

  it('skips 100 Continue, has no body for 204, reads an HTTP/1.0 body to the close', async () => {
    const replies = [
      'HTTP/1.1 100 Continue\r\n\r\n' + ok('{"after":"continue"}'),
      'HTTP/1.1 204 No Content\r\nx-a: b\r\n\r\n',
      'HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end',
    ];
    const srv = await rawServer((r) => {
      r.socket.write(replies[r.index]!);
      if (r.index === 2) r.socket.end();
    });
    try {
      const pool = poolFor(srv.url);
      assert.equal((await fetchVia(pool)).body.toString(), '{"after":"continue"}');
      const noContent = await fetchVia(pool);
      assert.equal(noContent.status, 204);
      assert.equal(noContent.body.length, 0);
      const old = await fetchVia(pool);
      assert.equal(old.body.toString(), 'until the end');
      assert.equal(srv.connections(), 1);
      await waitFor(() => pool.stats.connections === 0); // an until-close connection is not reused
    } finally {
      await srv.close();
    }
  });

  it('does not reuse a connection the backend marked Connection: close', async () => {
    const srv = await rawServer((r) => r.socket.write(ok('{}', 'connection: close\r\n')));
    try {
      const pool = poolFor(srv.url);
      await fetchVia(pool);
      await fetchVia(pool);
      assert.equal(srv.connections(), 2);
    } finally {
      await srv.close();
    }
  });

  it('reports malformed responses as protocol errors', async () => {
    const bad = [
      'HTTP/1.1 2x0 OK\r\n\r\n',
      'NOT HTTP AT ALL\r\n\r\n',
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n',
      'HTTP/1.1 200 OK\r\ncontent-length: 12abc\r\n\r\n',
      'HTTP/1.1 200 OK\r\nno colon here\r\ncontent-length: 0\r\n\r\n',
      'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc',
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabXY',
    ];
    const srv = await rawServer((r) => r.socket.write(bad[r.index]!));
    try {
      const pool = poolFor(srv.url);
      for (let i = 0; i < bad.length; i++) {
        await assert.rejects(fetchVia(pool), (e: unknown) => e instanceof PoolError && e.failure === 'protocol', `case ${i}`);
      }
      assert.equal(pool.stats.running, 0);
    } finally {
      await srv.close();
    }
  });

  it('refuses an oversized response head', async () => {
    const srv = await rawServer((r) => r.socket.write(`HTTP/1.1 200 OK\r\nx-big: ${'a'.repeat(2000)}\r\ncontent-length: 0\r\n\r\n`));
    try {
      await assert.rejects(
        fetchVia(poolFor(srv.url, { maxHeaderBytes: 1024 })),
        (e: unknown) => e instanceof PoolError && e.failure === 'protocol' && /too large/.test(e.message),
      );
    } finally {
      await srv.close();
    }
  });

  it('drops a connection that sends bytes nobody asked for', async () => {
    const srv = await rawServer((r) => {
      r.socket.write(ok('{}'));
      if (r.index === 0) setTimeout(() => r.socket.write('garbage'), 20);
    });
    try {
      const pool = poolFor(srv.url);
      await fetchVia(pool);
      await waitFor(() => pool.stats.connections === 0);
      await fetchVia(pool);
      assert.equal(srv.connections(), 2);
    } finally {
      await srv.close();
    }
  });

  it('times out a missing head and a silent body; refused connections are connect failures', async () => {
    const srv = await rawServer((r) => {
      if (r.index === 1) r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc');
    });
    try {
      const pool = poolFor(srv.url, { headersTimeoutMs: 150, bodyTimeoutMs: 150 });
      await assert.rejects(fetchVia(pool), (e: unknown) => e instanceof PoolError && e.failure === 'headers-timeout');
      await assert.rejects(fetchVia(pool), (e: unknown) => e instanceof PoolError && e.failure === 'body-timeout');
      assert.equal(pool.stats.running, 0);
    } finally {
      await srv.close();
    }
    const closed = await rawServer(() => {});
    const deadUrl = closed.url;
    await closed.close();
    await assert.rejects(
      fetchVia(poolFor(deadUrl)),
      (e: unknown) => e instanceof PoolError && e.failure === 'connect' && e.code === 'RC_ERR_POOL_CONNECT' && e.socketCode === 'ECONNREFUSED',
    );
  });

  it('reports a backend that closes mid-body, and one that closes a fresh connection without answering', async () => {
    const srv = await rawServer((r) => {
      if (r.index === 0) r.socket.end('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part');
      else r.socket.destroy();
    });
    try {
      const pool = poolFor(srv.url);
      await assert.rejects(fetchVia(pool), (e: unknown) => e instanceof PoolError && e.failure === 'closed');
      await assert.rejects(fetchVia(pool), (e: unknown) => e instanceof PoolError && e.failure === 'closed');
      assert.equal(srv.requests.length, 2, 'a request on a new connection is not sent twice');
    } finally {
      await srv.close();
    }
  });

  it('sends a request again when a kept-alive connection turns out to be closed', async () => {
    const srv = await rawServer((r) => {
      if (r.index === 1)
        r.socket.destroy(); // the server dropped the idle connection as the request came in
      else r.socket.write(ok(`{"n":${r.index}}`));
    });
    try {
      const pool = poolFor(srv.url);
      await fetchVia(pool);
      const res = await fetchVia(pool);
      assert.equal(res.body.toString(), '{"n":2}');
      assert.equal(srv.connections(), 2);
    } finally {
      await srv.close();
    }
  });

  it('pauses the body while the handler says so, and resumes it', async () => {
    const events = Array.from({ length: 50 }, (_, i) => `data: ${i}\n\n`).join('');
    const srv = await rawServer((r) => {
      r.socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n');
      // Many chunks in one write: the client reads them together.
      let out = '';
      for (const e of events.match(/.{1,7}/gs)!) out += `${Buffer.byteLength(e).toString(16)}\r\n${e}\r\n`;
      r.socket.write(out + '0\r\n\r\n');
    });
    try {
      const pool = poolFor(srv.url);
      let req: ReturnType<HttpPool['request']> | undefined;
      let received = '';
      let pausedAt = -1;
      let resumed = false;
      const done = new Promise<void>((resolve, reject) => {
        req = pool.request('/', '{}', {
          onHead() {},
          onData(chunk) {
            assert.ok(pausedAt < 0 || resumed, 'no data while paused');
            received += chunk.toString();
            if (pausedAt < 0 && received.length > 30) {
              pausedAt = received.length;
              setTimeout(() => {
                resumed = true;
                req!.resume();
              }, 50);
              return false;
            }
            return true;
          },
          onEnd: () => resolve(),
          onError: reject,
        });
      });
      await done;
      assert.ok(pausedAt > 0);
      assert.equal(received, events);
      await fetchVia(pool); // the connection went back to the pool, readable
      assert.equal(srv.connections(), 1);
    } finally {
      await srv.close();
    }
  });

  it('aborts a request in the middle of its body and frees its connection', async () => {
    const srv = await rawServer((r) => r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\npart'));
    try {
      const pool = poolFor(srv.url);
      let failure: PoolError | undefined;
      const req = pool.request('/', '{}', {
        onHead() {},
        onData() {
          return true;
        },
        onEnd() {
          assert.fail('no end after abort');
        },
        onError(e) {
          failure = e;
        },
      });
      await waitFor(() => srv.requests.length === 1);
      await new Promise((r) => setTimeout(r, 20));
      req.abort();
      assert.equal(pool.stats.running, 0);
      await waitFor(() => failure !== undefined);
      assert.equal(failure!.failure, 'aborted');
      await waitFor(() => pool.stats.connections === 0);
    } finally {
      await srv.close();
    }
  });

  it('fails the exchange of a handler that throws, and keeps serving', async () => {
    const srv = await rawServer((r) => r.socket.write(ok('{"fine":true}')));
    try {
      const pool = poolFor(srv.url);
      await assert.rejects(
        fetchVia(pool, '{}', '/', {
          onData() {
            throw new Error('handler bug');
          },
        }),
        (e: unknown) => e instanceof PoolError && e.failure === 'closed' && (e.cause as Error).message === 'handler bug',
      );
      assert.equal((await fetchVia(pool)).body.toString(), '{"fine":true}');
      assert.equal(pool.stats.running, 0);
    } finally {
      await srv.close();
    }
  });

  it('queues beyond its connection limit and aborts a queued request', async () => {
    const srv = await rawServer((r) => setTimeout(() => r.socket.write(ok(`{"n":${r.index}}`)), 30));
    try {
      const pool = poolFor(srv.url, { connections: 1 });
      const a = fetchVia(pool);
      const b = fetchVia(pool);
      let abortedQueued: PoolError | undefined;
      const c = pool.request('/', '{}', {
        onHead() {},
        onData: () => true,
        onEnd() {
          assert.fail('aborted');
        },
        onError(e) {
          abortedQueued = e;
        },
      });
      assert.equal(pool.stats.queued, 2);
      c.abort();
      assert.equal(pool.stats.queued, 1);
      assert.deepEqual([(await a).body.toString(), (await b).body.toString()], ['{"n":0}', '{"n":1}']);
      assert.equal(srv.connections(), 1);
      assert.equal(abortedQueued?.failure, 'aborted');
    } finally {
      await srv.close();
    }
  });

  it('close() lets running requests finish; destroy() ends them; a closed pool refuses new ones', async () => {
    const srv = await rawServer((r) => setTimeout(() => r.socket.write(ok('{"late":true}')), r.index === 0 ? 50 : 5000));
    try {
      const pool = poolFor(srv.url);
      const running = fetchVia(pool);
      await waitFor(() => srv.requests.length === 1);
      const closed = pool.close();
      await assert.rejects(fetchVia(pool), (e: unknown) => e instanceof PoolError && e.failure === 'pool-closed');
      assert.equal((await running).body.toString(), '{"late":true}');
      await closed;
      assert.equal(pool.stats.connections, 0);

      const other = poolFor(srv.url);
      const stuck = fetchVia(other);
      await waitFor(() => srv.requests.length === 2);
      const failed = assert.rejects(stuck, (e: unknown) => e instanceof PoolError && e.failure === 'closed');
      await other.destroy();
      await failed;
    } finally {
      await srv.close();
    }
  });

  it('speaks TLS to an https origin', async (t) => {
    const tls = localhostCertificate(t);
    if (!tls) return;
    const { cert, key } = tls;
    const server = createHttpsServer({ key, cert }, (req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => {
        body += d;
      });
      req.on('end', () => res.end(JSON.stringify({ path: req.url, body })));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as { port: number }).port;
      const pool = poolFor(`https://localhost:${port}`, { tls: { ca: cert } });
      const res = await fetchVia(pool, '{"secure":1}', '/v1/x');
      assert.deepEqual(JSON.parse(res.body.toString()), { path: '/v1/x', body: '{"secure":1}' });
      // Without the CA the certificate is refused: a connect failure, nothing sent.
      await assert.rejects(fetchVia(poolFor(`https://localhost:${port}`)), (e: unknown) => e instanceof PoolError && e.failure === 'connect');
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

const later = (ms: number) => new Promise((r) => setTimeout(r, ms));
const isProbe = (r: { head: string }) => r.head.startsWith('GET /health ');

describe('gateway http-pool: a busy backend is waited for, a dead one is not', () => {
  // Limits of 150 ms; the backends answer after several of them.
  const LIMITS: Partial<HttpPoolOptions> = { headersTimeoutMs: 150, bodyTimeoutMs: 150, probePath: '/health' };

  it('waits past the head and body limits for a backend that answers its probe', async () => {
    const srv = await rawServer((r) => {
      if (isProbe(r)) return void r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
      // A non-stream answer after 5 limits; a stream queued after its head for 4.
      void later(750).then(() => {
        if (r.body.toString() !== '"stream"') return void r.socket.write(ok('{"slow":true}'));
        r.socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n');
        void later(600).then(() => r.socket.write('6\r\ndata:1\r\n0\r\n\r\n'));
      });
    });
    try {
      const pool = poolFor(srv.url, LIMITS);
      const slow = await fetchVia(pool);
      assert.equal(slow.body.toString(), '{"slow":true}');
      const queued = await fetchVia(pool, '"stream"');
      assert.equal(queued.body.toString(), 'data:1');
      assert.ok(srv.requests.some(isProbe), 'the silent backend was asked whether it lives');
    } finally {
      await srv.close();
    }
  });

  it('waits for a slow head while other responses from the backend progress, with no probe', async () => {
    const srv = await rawServer((r) => {
      if (r.body.toString() === '"slow"') return void later(800).then(() => r.socket.write(ok('"done"')));
      // A stream that writes an event every 20 ms for 1 s: the backend is busy, and alive.
      r.socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n');
      let n = 0;
      const t = setInterval(() => {
        if (++n === 50) {
          clearInterval(t);
          r.socket.write('0\r\n\r\n');
        } else r.socket.write('1\r\n.\r\n');
      }, 20);
    });
    try {
      const pool = poolFor(srv.url, { headersTimeoutMs: 200, bodyTimeoutMs: 200 });
      const stream = fetchVia(pool, '"stream"');
      await waitFor(() => srv.requests.length === 1);
      const slow = await fetchVia(pool, '"slow"');
      assert.equal(slow.body.toString(), '"done"');
      assert.equal((await stream).body.length, 49);
    } finally {
      await srv.close();
    }
  });

  it('fails a request to a backend that accepts and never answers, probe included, with the idle-head error', async () => {
    const srv = await rawServer(() => {});
    try {
      const pool = poolFor(srv.url, LIMITS);
      await assert.rejects(
        fetchVia(pool),
        (e: unknown) => e instanceof PoolError && e.failure === 'headers-timeout' && e.code === 'RC_ERR_POOL_HEADERS_TIMEOUT' && /GET \/health/.test(e.message),
      );
      assert.ok(srv.requests.some(isProbe), 'the probe was sent');
      // A head, then silence: the body's error.
      const half = await rawServer((r) => {
        if (!isProbe(r)) r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc');
      });
      try {
        await assert.rejects(fetchVia(poolFor(half.url, LIMITS)), (e: unknown) => e instanceof PoolError && e.failure === 'body-timeout');
      } finally {
        await half.close();
      }
      assert.equal(pool.stats.running, 0);
    } finally {
      await srv.close();
    }
  });

  it('takes a 5xx answer to the probe for a dead backend', async () => {
    const srv = await rawServer((r) => {
      if (isProbe(r)) r.socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
    });
    try {
      await assert.rejects(
        fetchVia(poolFor(srv.url, LIMITS)),
        (e: unknown) => e instanceof PoolError && e.failure === 'headers-timeout' && /answered 503/.test(e.message),
      );
    } finally {
      await srv.close();
    }
  });

  it('ends a request at the total limit, however alive the backend', async () => {
    const srv = await rawServer((r) => {
      if (isProbe(r)) r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
      else r.socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\n.\r\n'); // and never ends
    });
    try {
      const pool = poolFor(srv.url, { ...LIMITS, requestTimeoutMs: 400 });
      await assert.rejects(
        fetchVia(pool),
        (e: unknown) => e instanceof PoolError && e.failure === 'request-timeout' && e.code === 'RC_ERR_POOL_REQUEST_TIMEOUT',
      );
      assert.equal(pool.stats.running, 0);
    } finally {
      await srv.close();
    }
  });
});

describe('gateway http-pool: connections rest before reuse', () => {
  it('opens a new connection rather than reuse one at once, and reuses one that has rested', async () => {
    const srv = await rawServer((r) => r.socket.write(ok('{}')));
    try {
      const pool = poolFor(srv.url, { reuseAfterMs: 500, restBeforeReuse: 'always' });
      await fetchVia(pool);
      await fetchVia(pool);
      assert.equal(srv.connections(), 2, 'the first connection had not rested');
      await later(600);
      await fetchVia(pool);
      assert.equal(srv.connections(), 2, 'a rested connection was reused');
      // At its connection limit the pool reuses one at once rather than queue.
      const one = poolFor(srv.url, { reuseAfterMs: 500, connections: 1, restBeforeReuse: 'always' });
      await fetchVia(one);
      await fetchVia(one);
      assert.equal(srv.connections(), 3);
    } finally {
      await srv.close();
    }
  });

  it('by default reuses a connection at once while the backend sends its head with its body', async () => {
    const srv = await rawServer((r) => r.socket.write(ok('{}')));
    try {
      const pool = poolFor(srv.url, { reuseAfterMs: 60_000 });
      for (let i = 0; i < 5; i++) await fetchVia(pool);
      assert.equal(srv.connections(), 1, 'no connection was opened to rest another');
      assert.equal(pool.rests, false);
    } finally {
      await srv.close();
    }
  });

  it('starts resting connections once a head came alone and the body after a delayed-ACK-like pause', async () => {
    // The head alone, the body 80 ms later: what a backend that leaves Nagle on does when our ACK
    // of its head is delayed (the first request, on a fresh connection, already shows it: it is
    // the same pattern seen on a connection reused at once that counts).
    const srv = await rawServer((r) => {
      r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n');
      void later(80).then(() => r.socket.write('{}'));
    });
    try {
      const pool = poolFor(srv.url, { reuseAfterMs: 60_000 });
      await fetchVia(pool);
      assert.equal(pool.rests, false, "a fresh connection is not in pingpong mode: its pause is the backend's own");
      // Reused at once (well within reuseAfterMs): the pause now counts. Tried a few times, in
      // case this machine delays a read past STALL_MAX_MS.
      for (let i = 0; i < 5 && !pool.rests; i++) await fetchVia(pool);
      assert.equal(pool.rests, true);
      const before = srv.connections();
      await fetchVia(pool);
      assert.equal(srv.connections(), before + 1, 'the last connection had not rested: a new one was opened');
    } finally {
      await srv.close();
    }
  });

  it('relays a backend that leaves Nagle on (head and each chunk in writes of their own), over and over', async () => {
    // A node:net backend with TCP_NODELAY off, writing like Python's http.server: the head in one
    // write, then each SSE event a small write of its own.
    const server = createServer((socket) => {
      socket.setNoDelay(false);
      let pending = '';
      socket.on('data', (d: Buffer) => {
        pending += d.toString('latin1');
        const end = pending.indexOf('\r\n\r\n');
        const length = Number(/content-length: *(\d+)/i.exec(pending)?.[1] ?? 0);
        if (end < 0 || pending.length < end + 4 + length) return;
        pending = pending.slice(end + 4 + length);
        socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n');
        for (let i = 0; i < 5; i++) {
          const e = `data: {"n":${i}}\n\n`;
          socket.write(`${e.length.toString(16)}\r\n${e}\r\n`);
        }
        socket.write('0\r\n\r\n');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const pool = poolFor(`http://127.0.0.1:${(server.address() as { port: number }).port}`, { reuseAfterMs: 100 });
    try {
      for (let i = 0; i < 10; i++) {
        const res = await fetchVia(pool);
        assert.equal(res.body.toString(), [0, 1, 2, 3, 4].map((n) => `data: {"n":${n}}\n\n`).join(''));
      }
      assert.equal(pool.stats.running, 0);
    } finally {
      await pool.destroy();
      await new Promise((r) => server.close(r));
    }
  });
});
