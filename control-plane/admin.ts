// Operator actions (the rc CLI's account, coupon, image and model commands). One definition,
// two transports: the admin API of a running control plane (POST /api/admin/<op> with the
// data dir's admin token), or the database opened directly when no platform runs. Either way
// the change is one database transaction and the events gateways need are published.
import { z } from 'zod';
import { modelEntrySchema } from '../lib/config.js';
import { accountByEmail, email, ensureKey, op, type AdminContext, type AdminOp } from './admin-op.js';
import { API_ERRORS } from './errors.js';
import { StoredFleet, type FleetControl } from './instances/fleet.js';
import { checkModel } from './model-check.js';
import { codeEntropyBits, MICROS, MIN_CUSTOM_CODE_BITS, toMicros } from './ledger.js';
import { hashPassword } from './passwords.js';
import { mergedCatalog } from './sources.js';
import { ACCOUNT_OPS } from './operator/account-ops.js';
import { auditTarget, recordAction } from './operator/audit.js';
import { INSTANCE_OPS } from './operator/instance-ops.js';
import { parseInput } from './validate.js';

export type { AdminContext } from './admin-op.js';
import { accountSummary, profile } from './views.js';

const credits = z.number().finite().min(-1e9).max(1e9);
/** The ledger and coupons keep whole micro-credits: an amount that rounds to 0 (1e-9) is refused, not written as 0. */
const notZeroMicros = (n: number) => toMicros(n) !== 0;
const ZERO_MICROS = `credits must not be 0 (the smallest amount is ${1 / MICROS})`;
const limit = z.number().int().positive().max(1e15).nullable().optional();
const hostName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, 'name must be 1-63 letters, digits, ".", "_" or "-"');
/** host:port of an agent's gRPC server; IPv6 addresses in brackets. */
const hostAddress = z
  .string()
  .regex(/^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([1-9][0-9]{0,4})$/, 'address must be host:port')
  .refine((a) => Number(a.slice(a.lastIndexOf(':') + 1)) <= 65535, 'address port must be at most 65535');
const agentToken = z.string().min(16, 'token must have at least 16 characters').max(512).regex(/^\S+$/, 'token must not contain spaces');
/** The running service's hosts, else the database's (made once per context: it prepares its statements). */
const fleet = (ctx: AdminContext): FleetControl => (ctx.fleet ??= new StoredFleet(ctx.store));

export const ADMIN_OPS = {
  'account.create': op(
    z.strictObject({
      email,
      credits: credits.min(0).default(0),
      verified: z.boolean().default(false),
      editor: z.boolean().default(false),
      operator: z.boolean().default(false),
      password: z.string().min(8, 'password must have at least 8 characters').max(256).optional(),
    }),
    async (ctx, i) => {
      const passwordHash = i.password ? await hashPassword(i.password) : null;
      const { store } = ctx;
      const account = await store.transaction(async (tx) => {
        const a = await tx.accounts.create({ email: i.email, passwordHash, verified: i.verified, isEditor: i.editor, isOperator: i.operator });
        if (i.credits > 0)
          await tx.ledger.append({ accountId: a.id, kind: 'grant', credits: i.credits, idempotencyKey: `grant:signup:${a.id}`, ref: 'rc account create' });
        return a;
      });
      if (account.verified) await ensureKey(ctx, account.id);
      return profile(store, (await store.accounts.byId(account.id))!);
    },
  ),
  'account.verify': op(z.strictObject({ email }), async (ctx, i) => {
    const a = await accountByEmail(ctx, i.email);
    await ctx.store.accounts.setVerified(a.id, true);
    await ensureKey(ctx, a.id);
    await ctx.publish({ type: 'account.changed', accountId: a.id });
    return profile(ctx.store, (await ctx.store.accounts.byId(a.id))!);
  }),
  'account.list': op(z.strictObject({}), async (ctx) => ({
    accounts: await Promise.all((await ctx.store.accounts.list()).map((a) => accountSummary(ctx.store, a))),
  })),
  'account.grant-credits': op(
    z.strictObject({
      email,
      credits: credits.refine(notZeroMicros, ZERO_MICROS),
      idempotency_key: z.string().min(1).max(200).optional(),
      reason: z.string().max(500).optional(),
    }),
    async (ctx, i) => {
      const a = await accountByEmail(ctx, i.email);
      const key = `grant:${i.idempotency_key ?? crypto.randomUUID()}`;
      const r = await ctx.store.ledger.append({ accountId: a.id, kind: 'grant', credits: i.credits, idempotencyKey: key, ref: i.reason ?? null });
      return { email: a.email, credits_added: r.applied ? i.credits : 0, credits: r.credits, applied: r.applied, idempotency_key: key };
    },
  ),
  'account.set-limits': op(z.strictObject({ email, rpm: limit, tpm: limit, daily_tokens: limit, clear: z.boolean().default(false) }), async (ctx, i) => {
    const a = await accountByEmail(ctx, i.email);
    const old = i.clear ? undefined : await ctx.store.limits.get(a.id);
    const pick = (v: number | null | undefined, prev: number | null | undefined) => (v !== undefined ? v : (prev ?? null));
    const l = await ctx.store.limits.set({
      accountId: a.id,
      rpm: pick(i.rpm, old?.rpm),
      tpm: pick(i.tpm, old?.tpm),
      dailyTokens: pick(i.daily_tokens, old?.dailyTokens),
    });
    await ctx.publish({ type: 'account.changed', accountId: a.id, limits: { rpm: l.rpm, tpm: l.tpm, dailyTokens: l.dailyTokens } });
    return { email: a.email, limits: { rpm: l.rpm, tpm: l.tpm, daily_tokens: l.dailyTokens } };
  }),
  'coupon.create': op(
    z.strictObject({
      credits: z.number().finite().positive('credits must be positive').max(1e9).refine(notZeroMicros, ZERO_MICROS),
      email: email.optional(),
      code: z
        .string()
        .trim()
        .regex(/^[A-Za-z0-9][A-Za-z0-9_-]{3,63}$/, 'code must be 4-64 letters, digits, - or _')
        // A short or patterned code falls to guessing however slow the redemption limits make it
        // (a 4-character one fell in 107,000 tries, issue 44).
        .refine((c) => codeEntropyBits(c) >= MIN_CUSTOM_CODE_BITS, {
          error: (iss) =>
            `code is too easy to guess: about ${Math.floor(codeEntropyBits(String(iss.input)))} bits, at least ${MIN_CUSTOM_CODE_BITS} needed (16 or more random letters and digits; leave it out for a generated code)`,
        })
        .optional(),
    }),
    async (ctx, i) => {
      const accountId = i.email ? (await accountByEmail(ctx, i.email)).id : null;
      const c = await ctx.store.coupons.create(i.credits, accountId, i.code);
      return i.email ? { code: c.code, credits: c.credits, email: i.email } : { code: c.code, credits: c.credits };
    },
  ),
  'coupon.list': op(z.strictObject({}), async (ctx) => ({ coupons: await ctx.store.coupons.list() })),
  'image.add': op(
    z.strictObject({
      name: z.string().trim().min(1).max(200),
      image: z.string().trim().min(1).max(512).regex(/^\S+$/, 'image must not contain spaces'),
      // Left out: an image already in the catalog keeps what it said; a new one serves no SSH.
      ssh: z.boolean().optional(),
    }),
    (ctx, i) => ctx.store.images.add(i.name, i.image, i.ssh),
  ),
  'image.disable': op(z.strictObject({ image: z.string().trim().min(1) }), async (ctx, i) => {
    if (!(await ctx.store.images.disable(i.image))) throw API_ERRORS.imageNotFound(i.image);
    return ctx.store.images.get(i.image);
  }),
  'image.set-ssh': op(z.strictObject({ image: z.string().trim().min(1), ssh: z.boolean() }), async (ctx, i) => {
    if (!(await ctx.store.images.setSsh(i.image, i.ssh))) throw API_ERRORS.imageNotFound(i.image);
    return ctx.store.images.get(i.image);
  }),
  'image.list': op(z.strictObject({}), async (ctx) => ({ images: await ctx.store.images.list() })),
  // The upstreams are checked first (model-check.ts): a model whose upstreams do not serve it is
  // not saved, unless `unchecked` (the operator's "Save anyway", rc model add --unchecked).
  'model.add': op(modelEntrySchema.extend({ unchecked: z.boolean().default(false) }), async (ctx, { unchecked, ...entry }) => {
    const check = unchecked ? undefined : await checkModel(entry);
    if (check && !check.ok) throw API_ERRORS.modelCheckFailed(check.summary);
    const e = await ctx.store.models.put(entry);
    await ctx.publish({ type: 'catalog.changed' });
    return check ? { ...e, check } : e;
  }),
  /** The check alone (nothing saved): what the operator's model form shows before saving. */
  'model.check': op(
    z.strictObject({ name: modelEntrySchema.shape.name, upstreams: modelEntrySchema.shape.upstreams, servedName: modelEntrySchema.shape.servedName }),
    (_ctx, i) => checkModel(i),
  ),
  'model.remove': op(z.strictObject({ name: z.string().min(1) }), async (ctx, i) => {
    if (!(await ctx.store.models.remove(i.name))) throw API_ERRORS.modelNotFound(i.name);
    await ctx.publish({ type: 'catalog.changed' });
    return { removed: i.name };
  }),
  'host.add': op(z.strictObject({ name: hostName, address: hostAddress, token: agentToken }), (ctx, i) => fleet(ctx).add(i)),
  'host.list': op(z.strictObject({}), async (ctx) => ({ hosts: await fleet(ctx).list() })),
  'host.drain': op(z.strictObject({ name: hostName }), (ctx, i) => fleet(ctx).setDraining(i.name, true)),
  'host.resume': op(z.strictObject({ name: hostName }), (ctx, i) => fleet(ctx).setDraining(i.name, false)),
  'host.remove': op(z.strictObject({ name: hostName, force: z.boolean().default(false) }), (ctx, i) => fleet(ctx).remove(i.name, i.force)),
  'model.list': op(z.strictObject({}), async (ctx) => {
    const inDb = new Set((await ctx.store.models.list()).map((m) => m.name));
    return { models: (await mergedCatalog(ctx.configuredModels, ctx.store)).map((m) => ({ ...m, source: inDb.has(m.name) ? 'database' : 'config' })) };
  }),
  ...ACCOUNT_OPS,
  ...INSTANCE_OPS,
} satisfies Record<string, AdminOp<z.ZodType>>;

export type AdminOpName = keyof typeof ADMIN_OPS;

export function isAdminOp(name: string): name is AdminOpName {
  return Object.hasOwn(ADMIN_OPS, name);
}

/** Validates `input` and runs the operation; ApiErrors (4xx) for bad input or unknown names. */
export async function runAdminOp(ctx: AdminContext, name: string, input: unknown): Promise<unknown> {
  if (!isAdminOp(name)) throw API_ERRORS.adminOpUnknown(name);
  const o = ADMIN_OPS[name] as AdminOp<z.ZodType>;
  const parsed = parseInput(o.input, input ?? {});
  const out = await o.run(ctx, parsed);
  await recordAction(ctx, name, parsed, auditTarget(parsed));
  return out;
}
