// The gateway snapshot (GET /api/internal/gateway-snapshot) gives standalone gateways what the
// embedded gateway applies: an account under review gets the unverified accounts' daily cap as a
// limit, and its sessions are marked without model access when that cap is 0
// (control-plane/model-access.ts). Before, replicas got the stored overrides and bare sessions,
// so an unverified account had the full cap, and a cap of 0 did not close the shared routes, on
// every replica but the embedded one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { gatewaySnapshotSchema } from '../../lib/gateway-snapshot.js';
import { gatewaySnapshot } from '../../control-plane/internal-routes.js';
import { Store } from '../../control-plane/store.js';
import { tempDir } from '../agent/harness.js';

function snapshotFor(store: Store, modelUnverifiedDailyTokens: number) {
  return gatewaySnapshot({
    store,
    catalog: async () => [],
    instanceRoutes: () => [],
    tunnel: { secret: 's'.repeat(32), proxyUrl: '' },
    access: { modelDailyTokens: 1_000_000, modelUnverifiedDailyTokens },
  });
}

test('the snapshot carries the unverified accounts cap and their sessions model access', async (t) => {
  const store = await Store.open({ dataDir: tempDir(t, 'rc-snapshot-') });
  t.after(() => store.close());
  const verified = await store.accounts.create({ email: 'v@example.com', verified: true });
  const review = await store.accounts.create({ email: 'r@example.com', verified: false });
  await store.sessions.create(verified.id, 60_000);
  await store.sessions.create(review.id, 60_000);

  const capped = gatewaySnapshotSchema.parse(await snapshotFor(store, 5_000));
  assert.deepEqual(
    capped.limits.find((l) => l.accountId === review.id),
    { accountId: review.id, rpm: null, tpm: null, dailyTokens: 5_000 },
  );
  assert.equal(
    capped.limits.find((l) => l.accountId === verified.id),
    undefined,
  );
  assert.ok(capped.sessions.every((s) => s.modelAccess !== false));

  const closed = gatewaySnapshotSchema.parse(await snapshotFor(store, 0));
  assert.equal(closed.sessions.find((s) => s.accountId === review.id)?.modelAccess, false);
  assert.notEqual(closed.sessions.find((s) => s.accountId === verified.id)?.modelAccess, false);
});
