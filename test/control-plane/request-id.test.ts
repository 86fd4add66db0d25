// Request ids: every platform API answer carries `x-request-id` (the client's, when it sends a
// sane one), and an unexpected error is logged as one JSON line with that id.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLogger } from '../../lib/log.js';
import { startPlatform } from './platform.js';

test('x-request-id: echoed when sane, generated otherwise, logged with unexpected errors', async (t) => {
  const lines: string[] = [];
  const p = await startPlatform({ logger: createLogger('error', {}, (l) => lines.push(l)) });
  t.after(() => p.close());
  const a = await p.account('rid@example.com', { verified: true });

  const echoed = await p.call('GET', '/api/me', { key: a.api_token!, headers: { 'x-request-id': 'client-42' } });
  assert.equal(echoed.status, 200);
  assert.equal(echoed.headers['x-request-id'], 'client-42');

  const generated = await p.call('GET', '/api/me', { key: a.api_token!, headers: { 'x-request-id': 'no spaces allowed' } });
  const id = String(generated.headers['x-request-id']);
  assert.match(id, /^[0-9a-f]{8}-[0-9a-z]+$/);
  assert.notEqual((await p.call('GET', '/api/health')).headers['x-request-id'], id, 'ids are unique');

  // The database closed under the server: a 500 whose log line names the request.
  await p.cp.store.close();
  const broken = await p.call('GET', '/api/me', { key: a.api_token!, headers: { 'x-request-id': 'broken-1' } });
  assert.equal(broken.status, 500);
  assert.deepEqual(broken.body, { detail: 'Internal server error' });
  const logged = lines.map((l) => JSON.parse(l) as { level: string; msg: string; requestId?: string; part?: string });
  assert.ok(
    logged.some((l) => l.level === 'error' && l.msg === 'unexpected error' && l.requestId === 'broken-1'),
    lines.join(''),
  );
});
