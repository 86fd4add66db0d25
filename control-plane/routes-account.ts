// Account endpoints of SPEC: profile, SSH key, API key rotation, coupon redemption, model usage.
import { z } from 'zod';
import type { Caller } from './auth.js';
import type { ApiDeps } from './deps.js';
import type { AttemptLimits } from './auth/attempt-limits.js';
import { API_ERRORS } from './errors.js';
import { route, type Route } from './router.js';
import { checkSshPublicKey } from './ssh-key.js';
import { profile } from './views.js';

const DAY_MS = 86_400_000;

/** The documented model-usage body (gateway/gates ModelUsage) when no gates are wired: nothing used yet. */
async function emptyUsage(deps: ApiDeps, accountId: number) {
  const now = deps.store.clock.now();
  const day = Math.floor(now / DAY_MS);
  const cap = (await deps.store.limits.get(accountId))?.dailyTokens ?? deps.settings.modelDailyTokens;
  return {
    day: new Date(day * DAY_MS).toISOString().slice(0, 10),
    daily_cap: cap,
    tokens_used: 0,
    tokens_reserved: 0,
    tokens_remaining: cap,
    requests: 0,
    resets_at: new Date((day + 1) * DAY_MS).toISOString(),
    by_model: {},
    by_hour: Array.from({ length: 24 }, (_, hour) => ({ hour, tokens: 0, requests: 0, by_model: {} })),
  };
}

/** `limits`: the coupon redemption attempts per account and per address (auth/rate-limit.ts RedemptionLimits: the policy). */
export function accountRoutes(deps: ApiDeps, limits: AttemptLimits): Route[] {
  const { store, bus } = deps;
  return [
    route({
      method: 'get',
      path: '/api/me',
      summary: 'The account profile; `credits` is the live balance',
      access: 'required',
      handle: async (_req, caller: Caller) => ({ body: await profile(store, caller.account) }),
    }),
    route({
      method: 'post',
      path: '/api/profile/ssh-key',
      summary: 'Set (or with "" remove) the SSH public key for instances launched afterwards',
      access: 'required',
      body: z.strictObject({ ssh_public_key: z.string() }),
      async handle({ body }, caller: Caller) {
        let key: string | null = null;
        if (body.ssh_public_key.trim() !== '') {
          const check = checkSshPublicKey(body.ssh_public_key);
          if (!check.ok) throw API_ERRORS.sshKeyInvalid(check.reason);
          key = check.key;
        }
        await store.accounts.setSshPublicKey(caller.account.id, key);
        return { body: { ssh_public_key: key } };
      },
    }),
    route({
      method: 'post',
      path: '/api/profile/api-token',
      summary: 'Issue a new API key; the old one stops at once',
      access: 'required',
      async handle(_req, caller: Caller) {
        if (!caller.account.verified) throw API_ERRORS.accountNotVerified();
        const accountId = caller.account.id;
        const k = await store.keys.issue(accountId); // the old key is gone from the database now: refused by this API at once
        if (k.revokedHash) await bus.publish({ type: 'key.revoked', keyHash: k.revokedHash, accountId });
        await bus.publish({ type: 'key.issued', keyHash: k.keyHash, accountId });
        return { body: { api_token: k.key } };
      },
    }),
    route({
      method: 'post',
      path: '/api/credits/redeem',
      summary: 'Redeem a coupon',
      access: 'required',
      body: z.strictObject({ coupon: z.string().trim().min(1, 'coupon must not be empty').max(128) }),
      async handle({ body, clientAddress }, caller: Caller) {
        if (deps.settings.couponRedemption !== 'open') throw API_ERRORS.redemptionClosed(deps.settings.couponRetryAfterSec);
        const wait = await limits.takeRedemption(caller.account.id, clientAddress);
        if (wait > 0) throw API_ERRORS.couponRateLimited(wait);
        return { body: await store.coupons.redeem(caller.account.id, body.coupon) };
      },
    }),
    route({
      method: 'get',
      path: '/api/profile/model-usage',
      summary: 'Shared model API usage today against the daily cap',
      access: 'required',
      async handle(_req, caller: Caller) {
        const id = caller.account.id;
        return { body: deps.modelUsage ? await deps.modelUsage(id) : await emptyUsage(deps, id) };
      },
    }),
  ];
}
