// What the audit log keeps of an operator action: who (the context's actor), the operation, its
// target (the account's e-mail, the host's or model's name, the image, the instance) and its input
// without secrets. Read-only operations (`*.list`, `model.check`) are not recorded.
import type { AdminContext } from '../admin-op.js';
import { CLI_DATABASE_ACTOR } from './audit-log.js';

/** Input fields that are secrets (a password, an agent token, a coupon code): never written to the log. */
const SECRET_FIELDS = new Set(['password', 'token', 'code']);

/** The thing an action is about, read from its input. */
export function auditTarget(input: unknown): string | null {
  if (input === null || typeof input !== 'object') return null;
  const i = input as Record<string, unknown>;
  for (const k of ['email', 'instance_id', 'name', 'image']) if (typeof i[k] === 'string') return i[k];
  return null;
}

export async function recordAction(ctx: AdminContext, action: string, input: unknown, target: string | null): Promise<void> {
  if (action.endsWith('.list') || action.endsWith('.check')) return;
  const detail = input !== null && typeof input === 'object' ? Object.fromEntries(Object.entries(input).filter(([k]) => !SECRET_FIELDS.has(k))) : input;
  await ctx.store.audit.record(ctx.actor ?? CLI_DATABASE_ACTOR, action, target, detail);
}
