// What every operator action is made of (admin.ts holds the table; operator/ adds the actions the
// operator's console needs): the context an action runs in, the declaration helper, and the
// lookups and key handling several actions share.
import { z } from 'zod';
import type { BusEvent } from '../lib/bus.js';
import type { ModelEntry } from '../lib/config.js';
import type { ControlPlaneSettings } from './deps.js';
import { API_ERRORS } from './errors.js';
import type { FleetControl } from './instances/fleet.js';
import type { Store } from './store.js';

/** What the instance actions need from the running instance service (operator/instance-ops.ts). */
export interface InstanceControl {
  /** Destroys an active instance with `reason` and the operator's `detail` in its status object; 404 when it is not active. */
  destroyById(instanceId: string, reason: string, detail: string): Promise<unknown>;
}

export interface AdminContext {
  store: Store;
  publish(event: BusEvent): Promise<void>;
  /** The models configured outside the database (RC_CONFIG or the default sim models). */
  configuredModels: readonly ModelEntry[];
  /** The running instance service's hosts; absent: the registry in the database only (changes apply at the next start). */
  fleet?: FleetControl;
  /** The running instance service; absent (the CLI on the database): instance actions are refused. */
  instances?: InstanceControl;
  /** The running control plane's settings, which a few actions change while it runs (coupon redemption). */
  settings?: Pick<ControlPlaneSettings, 'couponRedemption'>;
  /** Who acts, for the audit log: an operator's e-mail, the admin token, or the CLI on the database (default). */
  actor?: string;
  /** Lifetime of a launch verification token an operator issues (RC_LAUNCH_TOKEN_TTL_SEC; default: its default). */
  launchTokenTtlSec?: number;
}

export interface AdminOp<S extends z.ZodType> {
  input: S;
  run(ctx: AdminContext, input: z.output<S>): Promise<unknown> | unknown;
}
export const op = <S extends z.ZodType>(input: S, run: AdminOp<S>['run']): AdminOp<S> => ({ input, run });

export const email = z.string().trim().toLowerCase().pipe(z.email('must be an e-mail address')).pipe(z.string().max(254));

export async function accountByEmail(ctx: AdminContext, address: string) {
  const a = await ctx.store.accounts.byEmail(address);
  if (!a) throw API_ERRORS.accountNotFound(address);
  return a;
}

/** Issues a key when the account has none (verified accounts only) and tells the gateways. */
export async function ensureKey(ctx: AdminContext, accountId: number): Promise<void> {
  if ((await ctx.store.keys.current(accountId)) !== null) return;
  await issueKey(ctx, accountId);
}

/** Issues a new key (revoking the current one) and tells the gateways. */
export async function issueKey(ctx: AdminContext, accountId: number): Promise<void> {
  const k = await ctx.store.keys.issue(accountId);
  if (k.revokedHash) await ctx.publish({ type: 'key.revoked', keyHash: k.revokedHash, accountId });
  await ctx.publish({ type: 'key.issued', keyHash: k.keyHash, accountId });
}
