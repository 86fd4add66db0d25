// The instance endpoints: launch (two forms), status, destroy, and launch verification.
import { z } from 'zod';
import type { Caller } from '../auth.js';
import type { ApiDeps } from '../deps.js';
import type { BusEvent } from '../../lib/bus.js';
import { ADMIN_OPS, runAdminOp } from '../admin.js';
import { API_ERRORS } from '../errors.js';
import { ADMIN_TOKEN_ACTOR } from '../operator/audit-log.js';
import { route, type Route } from '../router.js';
import { sessionRequired } from './errors.js';
import type { InstanceService } from './service.js';

/** A path id: a positive integer, otherwise the template cannot exist (404). */
function templateId(raw: string | undefined): number {
  if (!raw || !/^[1-9][0-9]{0,14}$/.test(raw)) throw API_ERRORS.templateNotFound();
  return Number(raw);
}

/** Launch body of SPEC; gpu_count and the token are checked by the service (exact SPEC messages, in order). */
const launchBody = z.strictObject({
  gpu_count: z.unknown().optional(),
  launch_verification_token: z.unknown().optional(),
});

/** POST /api/notebook/request: the launch body plus the template. */
const requestBody = z.strictObject({
  template_id: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
  gpu_count: z.unknown().optional(),
  launch_verification_token: z.unknown().optional(),
});

export function instanceRoutes(service: InstanceService, deps: ApiDeps): Route[] {
  return [...launchRoutes(service), ...launchVerificationRoutes(service, deps)];
}

/** Launch (two forms), status and destroy of the caller's instance. */
function launchRoutes(service: InstanceService): Route[] {
  return [
    route({
      method: 'post',
      path: '/api/templates/:id/launch',
      summary: 'Launch an instance from a template',
      access: 'required',
      body: launchBody,
      optionalBody: true,
      handle: async ({ params, body }, caller: Caller) => ({ body: await service.launch(caller.account, templateId(params[0]), body) }),
    }),
    route({
      method: 'post',
      path: '/api/notebook/request',
      summary: 'Launch an instance (template in the body)',
      access: 'required',
      body: requestBody,
      handle: async ({ body }, caller: Caller) => ({ body: await service.launch(caller.account, body.template_id, body) }),
    }),
    route({
      method: 'get',
      path: '/api/notebook/status',
      summary: "The status object of the caller's latest instance",
      access: 'required',
      handle: async (_req, caller: Caller) => ({ body: await service.status(caller.account.id) }),
    }),
    route({
      // Read-only, for launch surfaces: what a launch costs, whether it can start now, and how
      // many launches the rate windows leave (so the 429 never comes as a surprise).
      method: 'get',
      path: '/api/launch-quote',
      summary: 'Price per GPU count, balance and the hours it buys, free GPUs, launches left in the rate windows',
      access: 'required',
      handle: async (_req, caller: Caller) => ({ body: await service.launchQuote(caller.account.id) }),
    }),
    route({
      method: 'del',
      path: '/api/notebook/current',
      summary: "Destroy the caller's active instance; billing stops now",
      access: 'required',
      handle: async (_req, caller: Caller) => ({ body: await service.destroyCurrent(caller.account.id) }),
    }),
  ];
}

/** Launch verification: the account holder's switch and tokens, and the operator's. */
function launchVerificationRoutes(service: InstanceService, deps: ApiDeps): Route[] {
  const { store } = deps;
  const ttlMs = () => service.settings.launchTokenTtlSec * 1000;
  return [
    route({
      // Turning launch verification on works with a key; turning it off needs a browser session,
      // so a leaked key can neither launch nor switch the protection off.
      method: 'post',
      path: '/api/profile/launch-verification',
      summary: 'Turn launch verification on (key or session) or off (session only)',
      access: 'required',
      body: z.strictObject({ enabled: z.boolean() }),
      async handle({ body }, caller: Caller) {
        if (!body.enabled && caller.via !== 'session') throw sessionRequired();
        await service.instances.setLaunchVerification(caller.account.id, body.enabled);
        return { body: { launch_verification: body.enabled } };
      },
    }),
    route({
      method: 'post',
      path: '/api/profile/launch-verification-token',
      summary: 'A single-use launch verification token (browser session only)',
      access: 'required',
      body: z.strictObject({}),
      async handle(_req, caller: Caller) {
        if (caller.via !== 'session') throw sessionRequired();
        const t = await service.instances.issueLaunchToken(caller.account.id, store.clock.now(), ttlMs());
        return { body: { launch_verification_token: t.token, expires_at: new Date(t.expiresAt).toISOString() } };
      },
    }),
    route({
      // Operator: an account's launch verification and tokens. The operation of the one table of
      // operator actions (`account.launch-verification`, also POST /api/admin/{op} and
      // /api/operator/{op}): validated and recorded in the audit log like every other.
      method: 'post',
      path: '/api/admin/instances/launch-verification',
      summary: 'Operator: launch verification of an account, and tokens (the account.launch-verification action)',
      access: 'admin',
      body: ADMIN_OPS['account.launch-verification'].input,
      async handle({ body }) {
        const ctx = {
          store,
          publish: (e: BusEvent) => deps.bus.publish(e),
          configuredModels: deps.configuredModels,
          actor: ADMIN_TOKEN_ACTOR,
          launchTokenTtlSec: service.settings.launchTokenTtlSec,
        };
        return { body: await runAdminOp(ctx, 'account.launch-verification', body) };
      },
    }),
  ];
}
