// The GPU telemetry endpoints (issue 41): an instance's GPUs with their short history to its owner,
// a host's every GPU with theirs to operators. Tenants never see another account's GPUs or hosts:
// the owner's route reads only the caller's own latest instance, and the host route is operator
// only (a key or a non-operator session gets 403).
import type { Caller } from '../auth.js';
import { API_ERRORS } from '../errors.js';
import { route, type Route } from '../router.js';
import { noInstance } from './errors.js';
import type { InstanceService } from './service.js';

export function gpuRoutes(service: InstanceService): Route[] {
  return [
    route({
      method: 'get',
      path: '/api/notebook/gpus',
      summary: "The GPUs of the caller's latest instance (while pending or ready): utilization, memory, and the samples taken while it held them",
      access: 'required',
      async handle(_req, caller: Caller) {
        const r = await service.instances.latest(caller.account.id);
        if (!r) throw noInstance();
        return { body: { status: r.state, ...service.gpus(r, true) } };
      },
    }),
    route({
      method: 'get',
      path: '/api/operator/hosts/:name/gpus',
      summary: 'Every GPU of a host: holder, utilization, memory, and the last samples (RC_INSTANCE_GPU_HISTORY_SAMPLES)',
      access: 'operator',
      handle({ params }) {
        const name = params[0] ?? '';
        const view = service.hostGpus(name);
        if (!view) throw API_ERRORS.hostNotFound(name);
        return { body: view };
      },
    }),
  ];
}
