// The operator API (issue 32): an operator account's browser session (router access `operator`:
// no credential 401, a key or a non-operator 403, CSRF on writes). Writes are the operator actions
// of admin.ts (the same code as `rc` and the admin token's route), recorded in the audit log with
// the operator's e-mail; reads are the views the console's operator pages show.
import { z } from 'zod';
import { runAdminOp, type AdminContext } from '../admin.js';
import type { Caller } from '../auth.js';
import type { ApiDeps } from '../deps.js';
import { API_ERRORS } from '../errors.js';
import { StoredFleet } from '../instances/fleet.js';
import { route, type Route } from '../router.js';
import { mergedCatalog } from '../sources.js';
import { followOperatorTopics } from './events.js';
import { liveInstances } from './instance-views.js';
import type { OperatorReads } from './reads.js';
import { operatorUsage } from './usage.js';
import { couponViews, operatorAccount, operatorAccountDetail } from './views.js';

const SEARCH_LIMIT = 100;
const searchQuery = z.object({ q: z.string().max(254, 'q must be at most 254 characters').optional() });
const auditQuery = z.object({
  limit: z
    .string()
    .regex(/^[0-9]{1,3}$/, 'limit must be a whole number')
    .transform(Number)
    .pipe(z.number().int().min(1, 'limit must be 1..200').max(200, 'limit must be 1..200'))
    .optional(),
  before: z
    .string()
    .regex(/^[0-9]{1,15}$/, 'before must be an entry id')
    .transform(Number)
    .optional(),
});

/** The views the routes and the event stream share. */
function operatorViews(deps: ApiDeps, admin: AdminContext) {
  const { store } = deps;
  return {
    reads: store.operatorReads,
    hosts: async () => ({ hosts: await (admin.fleet ?? new StoredFleet(store)).list() }),
    instances: async () => ({ instances: await liveInstances(store) }),
    review: async (reads: OperatorReads) => ({
      accounts: (await reads.reviewQueue()).map((r) => ({
        id: r.id,
        email: r.email,
        created_at: new Date(r.created_at).toISOString(),
        // Whether the address was confirmed; null when the platform does not ask (RC_EMAIL_VERIFICATION off).
        email_verified: deps.settings.emailVerification === 'required' ? r.email_verified === 1 : null,
        provider: r.provider,
      })),
    }),
  };
}

export function operatorRoutes(deps: ApiDeps, admin: AdminContext): Route[] {
  const v = operatorViews(deps, admin);
  const review = () => v.review(v.reads);
  return [
    ...accountReadRoutes(deps, v.reads, review),
    ...platformReadRoutes(deps, v.reads, v.hosts, v.instances),
    route({
      method: 'get',
      path: '/api/operator/events',
      summary: 'Events review, hosts and instances: their snapshot when opened and at every change',
      access: 'operator',
      stream: true,
      handle: () => ({ sse: (sse) => followOperatorTopics(deps.bus, sse, { review, hosts: v.hosts, instances: v.instances }) }),
    }),
    route({
      method: 'post',
      path: '/api/operator/:op',
      summary: 'An operator action (the operations of `rc` and POST /api/admin/{op}), audited with the operator’s e-mail',
      access: 'operator',
      body: z.record(z.string(), z.unknown()),
      async handle({ params, body }, caller: Caller) {
        return { body: await runAdminOp({ ...admin, actor: caller.account.email }, params[0]!, body) };
      },
    }),
  ];
}

/** Review queue, accounts, one account, coupons, the audit log. */
function accountReadRoutes(deps: ApiDeps, reads: OperatorReads, review: () => Promise<unknown>): Route[] {
  const { store } = deps;
  return [
    route({
      method: 'get',
      path: '/api/operator/review',
      summary: 'Accounts waiting for review, newest first',
      access: 'operator',
      handle: async () => ({ body: await review() }),
    }),
    route({
      method: 'get',
      path: '/api/operator/accounts',
      summary: 'Accounts whose e-mail contains q (all without q), newest first, at most 100',
      access: 'operator',
      query: searchQuery,
      handle: async ({ query }) => {
        const ids = await reads.search(query.q?.trim() ?? '', SEARCH_LIMIT);
        return { body: { accounts: await Promise.all(ids.map(async (id) => operatorAccount(store, (await store.accounts.byId(id))!))) } };
      },
    }),
    route({
      method: 'get',
      path: '/api/operator/accounts/:id',
      summary: 'One account: balance, flags, limits, instance, ledger, usage today',
      access: 'operator',
      async handle({ params }) {
        const a = /^[0-9]{1,15}$/.test(params[0]!) ? await store.accounts.byId(Number(params[0])) : undefined;
        if (!a) throw API_ERRORS.accountIdNotFound();
        return { body: await operatorAccountDetail(store, a, deps.modelUsage) };
      },
    }),
    route({
      method: 'get',
      path: '/api/operator/coupons',
      summary: 'Coupons with their redeemed state, and whether redemption is open',
      access: 'operator',
      handle: async () => ({ body: { coupons: await couponViews(store), coupon_redemption: deps.settings.couponRedemption } }),
    }),
    route({
      method: 'get',
      path: '/api/operator/audit',
      summary: 'The audit log of operator actions, newest first (limit 1..200, before: the previous page’s next_before)',
      access: 'operator',
      query: auditQuery,
      handle: async ({ query }) => ({ body: await store.audit.page(query.limit ?? 50, query.before) }),
    }),
  ];
}

/** Hosts, instances, catalogs, usage. */
function platformReadRoutes(deps: ApiDeps, reads: OperatorReads, hosts: () => Promise<unknown>, instances: () => Promise<unknown>): Route[] {
  const { store } = deps;
  return [
    route({
      method: 'get',
      path: '/api/operator/hosts',
      summary: 'The fleet: state, GPUs used and free, instances, last contact',
      access: 'operator',
      handle: async () => ({ body: await hosts() }),
    }),
    route({
      method: 'get',
      path: '/api/operator/instances',
      summary: "Every account's live instances (queued, pending, ready, stopping)",
      access: 'operator',
      handle: async () => ({ body: await instances() }),
    }),
    route({
      method: 'get',
      path: '/api/operator/catalogs',
      summary: 'The image catalog and the shared model catalog',
      access: 'operator',
      async handle() {
        const inDb = new Set((await store.models.list()).map((m) => m.name));
        const catalog = await mergedCatalog(deps.configuredModels, store);
        const contexts = await deps.modelContexts.of(catalog); // the window in use, as Model APIs shows it
        const models = catalog.map((m, i) => ({
          ...m,
          context: contexts[i]!.context,
          contextSource: contexts[i]!.source,
          source: inDb.has(m.name) ? 'database' : 'config',
        }));
        return { body: { images: await store.images.list(), models } };
      },
    }),
    route({
      method: 'get',
      path: '/api/operator/usage',
      summary: 'Shared-model tokens, GPU hours and credits by day, top accounts',
      access: 'operator',
      handle: async () => ({ body: await operatorUsage(store, reads, deps.modelUsage) }),
    }),
  ];
}
