// The operator actions on instances: the list of live ones (every account's) and destroying one
// with a reason the owner sees in the status object (`reason: destroyed_by_operator`, `detail`).
import { z } from 'zod';
import { op } from '../admin-op.js';
import { API_ERRORS } from '../errors.js';
import { EndReason } from '../instances/lifecycle.js';
import { liveInstances } from './instance-views.js';

/** Status `reason` of an instance an operator destroyed; the operator's words are its `detail`. */
export const DESTROYED_BY_OPERATOR = EndReason.operator;

export const INSTANCE_OPS = {
  'instance.list': op(z.strictObject({}), async (ctx) => ({ instances: await liveInstances(ctx.store) })),
  'instance.destroy': op(
    z.strictObject({
      instance_id: z.string().trim().min(1).max(64),
      reason: z.string().trim().min(1, 'reason is required: the owner sees it').max(500),
    }),
    async (ctx, i) => {
      if (!ctx.instances) throw API_ERRORS.needsRunningPlatform('instance.destroy');
      return ctx.instances.destroyById(i.instance_id, DESTROYED_BY_OPERATOR, i.reason);
    },
  ),
};
