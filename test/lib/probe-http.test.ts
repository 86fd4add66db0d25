// The client for asking backends and instances about themselves (lib/probe-http.ts):
// every dedicated instance is an origin of its own, so a client that kept a pool per origin for
// good (Node 20's fetch did: the soak's heap grew 18 KB per instance launched) leaks as
// instances come and go. Real HTTP servers on ephemeral ports.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';
import { probeGet, probeOrigins } from '../../lib/probe-http.js';
import { listenLocal, waitFor } from '../helpers.js';

test('a backend that is gone is forgotten: no pool is kept for its origin', async (t) => {
  const servers = Array.from({ length: 30 }, () => createServer((_req, res) => res.end('{"data":[]}')));
  const origins: string[] = [];
  for (const s of servers) origins.push(`http://127.0.0.1:${await listenLocal(t, s)}`);
  for (const o of origins) assert.deepEqual(await probeGet(`${o}/v1/models`, 5_000), { status: 200, text: '{"data":[]}' });
  assert.ok(
    origins.every((o) => probeOrigins().includes(o)),
    'a pool per origin while its connection lives',
  );
  // The instances go: their servers close their connections.
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
  await waitFor(() => origins.every((o) => !probeOrigins().includes(o)), 10_000);
});

test('an answer past 1 MiB is refused, not held; a status and a small body come back as they are', async (t) => {
  const big = createServer((_req, res) => {
    res.writeHead(200);
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    for (let i = 0; i < 64; i++) res.write(chunk); // 4 MiB
    res.end();
  });
  const bigPort = await listenLocal(t, big);
  await assert.rejects(probeGet(`http://127.0.0.1:${bigPort}/metrics`, 5_000), /passed 1048576 bytes/);
  const missing = createServer((_req, res) => {
    res.writeHead(404);
    res.end('nope');
  });
  const port = await listenLocal(t, missing);
  assert.deepEqual(await probeGet(`http://127.0.0.1:${port}/metrics`, 5_000), { status: 404, text: 'nope' });
});
