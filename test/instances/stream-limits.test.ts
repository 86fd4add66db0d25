// Issue 44 on the platform API: its event streams (instance status, logs, operator events) are
// bounded per account and per client address (control-plane/router.ts, RC_API_STREAMS_*). Past a
// bound: 429 `{detail}` naming it, Retry-After: 30, before the route does any work; another
// account (or address) is served; a place is given back when its stream closes, whoever closes
// it, and when the route answers without a stream.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openRequest, type OpenRequest } from '../held-streams.js';
import { waitFor } from '../helpers.js';
import { startPlatform } from './harness.js';

test('event streams per account and per address: 429 past each, the other account and address served, every close frees its place', async (t) => {
  const p = await startPlatform(t, { apiSettings: { apiStreamsPerAccount: 2, apiStreamsPerAddress: 3 } });
  const a = await p.account('a@example.com');
  const b = await p.account('b@example.com');
  const streams = p.cp.streams;
  const open = (path: string, key: string, localAddress?: string) =>
    openRequest(`${p.cp.url}${path}`, undefined, { authorization: `Bearer ${key}` }, localAddress);
  const held: OpenRequest[] = [];
  t.after(() => {
    for (const h of held) h.abort();
  });

  held.push(await open('/api/notebook/events', a.key), await open('/api/notebook/events', a.key));
  for (const h of held) {
    assert.equal(h.status, 200);
    assert.match(String(h.headers['content-type']), /^text\/event-stream/);
  }
  const overAccount = await open('/api/notebook/events', a.key);
  assert.equal(overAccount.status, 429);
  assert.equal(overAccount.headers['retry-after'], '30');
  assert.deepEqual(JSON.parse(overAccount.text), {
    detail: 'Too many event streams for this account: at most 2 (RC_API_STREAMS_PER_ACCOUNT); wait for one to end',
  });
  // The logs route is a stream route too: refused before it looks for an instance.
  assert.equal((await open('/api/notebook/logs?follow=1', a.key)).status, 429);

  // Another account from the same address: served, until the address holds 3.
  held.push(await open('/api/notebook/events', b.key));
  assert.equal(held[2]!.status, 200);
  const overAddress = await open('/api/notebook/events', b.key);
  assert.equal(overAddress.status, 429);
  assert.equal(JSON.parse(overAddress.text).detail, 'Too many event streams from this address: at most 3 (RC_API_STREAMS_PER_ADDRESS); wait for one to end');
  // From another address (loopback 127.0.0.2): served.
  held.push(await open('/api/notebook/events', b.key, '127.0.0.2'));
  assert.equal(held[3]!.status, 200);
  assert.deepEqual(streams.held(), { accounts: 2, addresses: 2, instances: 0, total: 4 });

  // A client that goes away frees its place: account a streams again.
  held[0]!.abort();
  await waitFor(() => streams.held().total === 3);
  // A stream route that answers without a stream (no instance: 404) gives its place back at once.
  const noInstance = await open('/api/notebook/logs', a.key);
  await waitFor(() => noInstance.ended);
  assert.equal(noInstance.status, 404);
  assert.equal(streams.held().total, 3);
  held.push(await open('/api/notebook/events', a.key));
  assert.equal(held[4]!.status, 200);
  for (const h of held) h.abort();
  await waitFor(() => streams.held().total === 0);
  assert.deepEqual(streams.held(), { accounts: 0, addresses: 0, instances: 0, total: 0 });
});

test('a stream the server ends (logs without follow) gives its place back', async (t) => {
  const p = await startPlatform(t, { apiSettings: { apiStreamsPerAccount: 1 } });
  const a = await p.account('a@example.com');
  const streams = p.cp.streams;
  // An instance that is queued forever (no host): its logs, without follow, end at once.
  const tpl = await p.template(a.id);
  assert.equal((await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: a.key, body: {} })).status, 200);
  for (let i = 0; i < 3; i++) {
    const logs = await openRequest(`${p.cp.url}/api/notebook/logs?tail=0`, undefined, { authorization: `Bearer ${a.key}` });
    assert.equal(logs.status, 200);
    await waitFor(() => logs.ended);
    assert.match(logs.text, /event: end\n/);
    await waitFor(() => streams.held().total === 0);
  }
});
