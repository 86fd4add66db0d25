// GET /api/operator/events: the review queue, the hosts and the live instances as server-sent
// events, so the operator's pages follow them without a reload. Each topic is sent when the
// stream opens and again whenever its snapshot changes: recomputed soon after a bus event that
// may touch it (sign-ups, verifications, instance changes) and every few seconds for what the bus
// does not carry (a host's link coming and going, a drain).
import type { Bus, BusEvent } from '../../lib/bus.js';
import type { Sse } from '../sse.js';

export type Topic = 'review' | 'hosts' | 'instances';
export type Snapshots = Record<Topic, () => Promise<unknown>>;

const POLL_MS = 2_000;
const SETTLE_MS = 100;

/** The topics a bus event may change. */
function topicsOf(e: BusEvent): Topic[] {
  if (e.type === 'instance.changed') return ['instances', 'hosts'];
  if (e.type === 'account.changed' || e.type === 'session.started' || e.type === 'key.issued') return ['review', 'instances'];
  return [];
}

export function followOperatorTopics(bus: Bus, sse: Sse, snapshots: Snapshots): void {
  const last = new Map<Topic, string>();
  const dirty = new Set<Topic>();
  const topics = Object.keys(snapshots) as Topic[];
  const reads = new Map<Topic, number>();
  const push = async (t: Topic) => {
    // Reads may finish out of order: only the newest of a topic is sent.
    const n = (reads.get(t) ?? 0) + 1;
    reads.set(t, n);
    let json: string;
    try {
      json = JSON.stringify(await snapshots[t]());
    } catch {
      return; // the next event or poll reads it again
    }
    if (reads.get(t) !== n || last.get(t) === json || !sse.open) return;
    last.set(t, json);
    sse.send(t, json);
  };
  for (const t of topics) void push(t);
  let settle: NodeJS.Timeout | undefined;
  const off = bus.subscribe((e) => {
    for (const t of topicsOf(e)) dirty.add(t);
    if (dirty.size === 0 || settle) return;
    // Several events of one change (state, then billing) are sent as one snapshot.
    settle = setTimeout(() => {
      settle = undefined;
      for (const t of [...dirty]) void push(t);
      dirty.clear();
    }, SETTLE_MS);
  });
  const poll = setInterval(() => {
    for (const t of topics) void push(t);
  }, POLL_MS);
  sse.onClose(() => {
    off();
    clearInterval(poll);
    clearTimeout(settle);
  });
}
