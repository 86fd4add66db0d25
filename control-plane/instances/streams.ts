// The live instance routes, as server-sent events (control-plane/sse.ts):
//
// - GET /api/notebook/logs?tail=N&follow=1: the current (latest) instance's log lines from its
//   host agent's StreamLogs; events `log` (one line each), then `end` ({status}) when the
//   instance ended or, without follow, after the tail (`stream_error` {detail} when the host cannot
//   be read). A queued instance is waited for (follow)
//   until it is placed. Once the host has removed an ended instance, its saved tail is served.
// - GET /api/notebook/events: the caller's current instance's status object whenever it
//   changes (event `status`; data null when the account never had one), with `queue_position`
//   (1 = next to be placed) while it waits for capacity, so clients need not poll; and event
//   `gpus` (its GPUs' latest figures, the shape of GET /api/notebook/gpus without the history)
//   whenever its host reports a new telemetry sample of them.
import { z } from 'zod';
import { AgentCallError } from '../../agent/client.js';
import type { Bus } from '../../lib/bus.js';
import type { Caller } from '../auth.js';
import type { ApiDeps } from '../deps.js';
import { route, type Route } from '../router.js';
import type { Sse } from '../sse.js';
import { noInstance } from './errors.js';
import type { InstanceService } from './service.js';
import { ACTIVE } from './states.js';
import type { InstanceRow } from './store.js';
import type { InstanceStatus } from './views.js';

/** Lines a tail may ask for (the agent keeps 1000 in memory and reads older ones from the file). */
export const MAX_TAIL = 1000;

export const logsQuery = z.object({
  tail: z
    .string()
    .regex(/^[0-9]{1,4}$/, 'tail must be a whole number')
    .transform(Number)
    .pipe(z.number().int().max(MAX_TAIL, `tail must be at most ${MAX_TAIL}`))
    .optional(),
  follow: z.enum(['0', '1', 'true', 'false'], 'follow must be 1 or 0').optional(),
});

export type StatusEvent = InstanceStatus & { queue_position: number | null };

/** Resolves at the next change of instance `id` (or when `signal` aborts). */
function nextChange(bus: Bus, id: string, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      off();
      signal.removeEventListener('abort', done);
      resolve();
    };
    const off = bus.subscribe((ev) => {
      if (ev.type === 'instance.changed' && ev.instanceId === id) done();
    });
    signal.addEventListener('abort', done, { once: true });
  });
}

const isNotFound = (err: unknown) => err instanceof AgentCallError && err.code === 'RC_ERR_AGENT_NOT_FOUND';

async function pipeLogs(service: InstanceService, bus: Bus, first: InstanceRow, sse: Sse, tail: number, follow: boolean): Promise<void> {
  const ac = new AbortController();
  sse.onClose(() => ac.abort());
  const send = async (line: string) => {
    if (!sse.send('log', line)) await sse.drain();
  };
  let r = first;
  try {
    // Not placed yet: nothing to read until a host runs it.
    while (follow && r.agent_id === null && ACTIVE.includes(r.state) && !ac.signal.aborted) {
      await nextChange(bus, r.id, ac.signal);
      r = (await service.instances.get(r.id)) ?? r;
    }
    if (ac.signal.aborted) return;
    const conn = r.agent_id === null ? undefined : service.agents.get(r.agent_id);
    let fromHost = false;
    if (conn?.connected) {
      try {
        for await (const line of conn.client.logs(r.id, { tail, follow, signal: ac.signal })) {
          fromHost = true;
          await send(line);
        }
        fromHost = true;
      } catch (err) {
        if (!isNotFound(err) || fromHost) throw err;
      }
    }
    if (!fromHost) {
      const saved = await service.logTails.get(r.id);
      if (saved === undefined && r.agent_id !== null && !conn?.connected) {
        sse.send('stream_error', { detail: "The instance's host is not reachable; try again later" });
        return;
      }
      for (const line of tail === 0 ? [] : (saved ?? []).slice(-tail)) await send(line);
    }
    const now = (await service.instances.get(r.id)) ?? r;
    sse.send('end', { status: now.state, reason: now.reason });
  } catch (err) {
    if (!ac.signal.aborted) sse.send('stream_error', { detail: err instanceof Error ? err.message : 'Log stream failed' });
  } finally {
    sse.end();
  }
}

/** The status object plus the queue position (1-based) of a queued instance. */
export async function statusEvent(service: InstanceService, r: InstanceRow): Promise<StatusEvent> {
  return { ...(await service.view(r)), queue_position: await service.queuePosition(r) };
}

function followStatus(service: InstanceService, bus: Bus, accountId: number, sse: Sse): void {
  let current: InstanceRow | undefined;
  let last = '';
  // Events are handled one after another, in the order they came (each reads the database).
  let handled = Promise.resolve();
  const inOrder = (fn: () => Promise<void>) => {
    handled = handled.then(fn).catch(() => {}); // a failed read: the next event reads again
  };
  const push = async () => {
    const text = JSON.stringify(current ? await statusEvent(service, current) : null);
    if (text === last || !sse.open) return;
    last = text;
    sse.send('status', text);
  };
  inOrder(async () => {
    current = await service.instances.latest(accountId);
    await push();
  });
  // Telemetry comes every few seconds per GPU: told in this process, never through the bus.
  // In order with the status events, so that none comes before the first status.
  const offSamples = service.onGpuSamples((ids) => {
    inOrder(async () => {
      if (current && ids.has(current.id) && sse.open) sse.send('gpus', JSON.stringify(service.gpus(current, false)));
    });
  });
  sse.onClose(offSamples);
  // A tunnel of the current instance opened or closed (the brokers' reports, live-tunnels.ts).
  const offTunnels = service.tunnels.onChange((id) => {
    if (sse.open && current?.id === id) inOrder(push);
  });
  sse.onClose(offTunnels);
  const off = bus.subscribe((ev) => {
    if (ev.type !== 'instance.changed' || !sse.open) return;
    inOrder(async () => {
      if (current && ev.instanceId === current.id) {
        current = await service.instances.get(current.id);
      } else {
        const changed = await service.instances.get(ev.instanceId);
        if (changed?.account_id === accountId)
          current = changed; // a new launch
        // Another account's instance placed or ended: a queued one may have moved up.
        else if (!(current?.state === 'pending' && current.agent_id === null)) return;
      }
      await push();
    });
  });
  sse.onClose(off);
}

export function streamRoutes(service: InstanceService, deps: ApiDeps): Route[] {
  return [
    route({
      method: 'get',
      path: '/api/notebook/logs',
      access: 'required',
      query: logsQuery,
      stream: true,
      summary: "The current instance's logs as server-sent events (`log` per line, then `end`); `follow=1` keeps streaming until it ends",
      async handle({ query }, caller: Caller) {
        const r = await service.instances.latest(caller.account.id);
        if (!r) throw noInstance();
        const tail = query.tail ?? 100;
        const follow = query.follow === '1' || query.follow === 'true';
        return { sse: (sse) => void pipeLogs(service, deps.bus, r, sse, tail, follow) };
      },
    }),
    route({
      method: 'get',
      path: '/api/notebook/events',
      access: 'required',
      stream: true,
      summary: "Status changes of the caller's current instance as server-sent events (`status`, with queue_position)",
      handle: (_req, caller: Caller) => ({ sse: (sse) => followStatus(service, deps.bus, caller.account.id, sse) }),
    }),
  ];
}
