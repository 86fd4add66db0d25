// The operator actions on accounts beyond the CLI's first ones (admin.ts): the operator flag,
// review (reject), disabling, the API key, coupon redemption. Part of the one table of operator
// actions, so the console (POST /api/operator/<op>), the admin API and `rc` run the same code.
import { z } from 'zod';
import { accountByEmail, email, issueKey, op, type AdminContext } from '../admin-op.js';
import { API_ERRORS } from '../errors.js';
import { EndReason } from '../instances/lifecycle.js';
import { resolveInstanceSettings } from '../instances/settings.js';
import { operatorAccount } from './views.js';

/**
 * Disables (or enables again) an account; disabling ends its sessions, revokes its key (telling the
 * gateways) and destroys its active instance when the instance service runs.
 */
async function setDisabled(ctx: AdminContext, accountId: number, disabled: boolean): Promise<void> {
  const { store } = ctx;
  const ended = await store.transaction(async (tx) => {
    await tx.accounts.setDisabled(accountId, disabled);
    if (!disabled) return { sessions: [] as string[], key: undefined };
    return { sessions: await tx.sessions.endAll(accountId), key: await tx.keys.revoke(accountId) };
  });
  for (const tokenHash of ended.sessions) await ctx.publish({ type: 'session.ended', tokenHash });
  if (ended.key) await ctx.publish({ type: 'key.revoked', keyHash: ended.key, accountId });
  await ctx.publish({ type: 'account.changed', accountId });
  // Its instance would bill an account nobody can sign in to: it ends too (billed up to now).
  const active = disabled ? await store.instances.active(accountId) : undefined;
  if (active && ctx.instances) await ctx.instances.destroyById(active.id, ACCOUNT_DISABLED_REASON, 'The account was disabled by an operator');
}

/** Status `reason` of an instance ended because its account was disabled. */
export const ACCOUNT_DISABLED_REASON = EndReason.accountDisabled;

export const ACCOUNT_OPS = {
  'account.set-operator': op(z.strictObject({ email, operator: z.boolean() }), async (ctx, i) => {
    const a = await accountByEmail(ctx, i.email);
    await ctx.store.accounts.setOperator(a.id, i.operator);
    await ctx.publish({ type: 'account.changed', accountId: a.id });
    return operatorAccount(ctx.store, (await ctx.store.accounts.byId(a.id))!);
  }),
  // Review: a rejected sign-up is disabled (its sessions end at once) and leaves the queue.
  'account.reject': op(z.strictObject({ email }), async (ctx, i) => {
    const a = await accountByEmail(ctx, i.email);
    if (a.verified) throw API_ERRORS.accountVerified(a.email);
    await setDisabled(ctx, a.id, true);
    return operatorAccount(ctx.store, (await ctx.store.accounts.byId(a.id))!);
  }),
  'account.disable': op(z.strictObject({ email, disabled: z.boolean().default(true) }), async (ctx, i) => {
    const a = await accountByEmail(ctx, i.email);
    await setDisabled(ctx, a.id, i.disabled);
    return operatorAccount(ctx.store, (await ctx.store.accounts.byId(a.id))!);
  }),
  'account.rotate-key': op(z.strictObject({ email }), async (ctx, i) => {
    const a = await accountByEmail(ctx, i.email);
    if (!a.verified || a.disabled) throw API_ERRORS.noKeyAllowed(a.email);
    await issueKey(ctx, a.id);
    return operatorAccount(ctx.store, a);
  }),
  'account.revoke-key': op(z.strictObject({ email }), async (ctx, i) => {
    const a = await accountByEmail(ctx, i.email);
    const old = await ctx.store.keys.revoke(a.id);
    if (old) await ctx.publish({ type: 'key.revoked', keyHash: old, accountId: a.id });
    return operatorAccount(ctx.store, a);
  }),
  // An account's launch verification (control-plane/instances/README.md), and a token for it. The
  // admin route POST /api/admin/instances/launch-verification runs this op: it switched the
  // protection off and minted tokens outside the audit log (issue 44).
  'account.launch-verification': op(z.strictObject({ email, enabled: z.boolean().optional(), issue_token: z.boolean().default(false) }), async (ctx, i) => {
    const { store } = ctx;
    const a = await accountByEmail(ctx, i.email);
    if (i.enabled !== undefined) await store.instances.setLaunchVerification(a.id, i.enabled);
    const out: Record<string, unknown> = { email: a.email, launch_verification: (await store.accounts.byId(a.id))!.launchVerification };
    if (i.issue_token) {
      const ttlMs = (ctx.launchTokenTtlSec ?? resolveInstanceSettings().launchTokenTtlSec) * 1000;
      const t = await store.instances.issueLaunchToken(a.id, store.clock.now(), ttlMs);
      out.launch_verification_token = t.token;
      out.expires_at = new Date(t.expiresAt).toISOString();
    }
    return out;
  }),
  // SPEC's 503 on POST /api/credits/redeem while closed. Held by the running control plane (its
  // settings); a restart goes back to RC_COUPON_REDEMPTION.
  'coupon.redemption': op(z.strictObject({ open: z.boolean() }), (ctx, i) => {
    if (!ctx.settings) throw API_ERRORS.needsRunningPlatform('coupon.redemption');
    ctx.settings.couponRedemption = i.open ? 'open' : 'closed';
    return { coupon_redemption: ctx.settings.couponRedemption };
  }),
};
