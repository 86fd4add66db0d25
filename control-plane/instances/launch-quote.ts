// What a launch would cost and whether it can start now, for the console's launch surfaces
// (GET /api/launch-quote): the price per GPU count, the balance and the hours it buys, the free
// GPUs of the hosts that take placements, and the launch rate windows with what is left in each.
// Read-only: the same facts the launch checks (launch.ts) and placement (placement.ts) use.
import type { InstanceContext } from './context.js';
import { GPU_COUNTS } from './launch.js';
import type { AgentConnection } from './agents.js';
import type { RateWindow } from './settings.js';

export interface LaunchOption {
  gpu_count: number;
  credits_per_hour: number;
  /** The launch rule (SPEC): the balance must be at least the GPU count. */
  min_balance: number;
  affordable: boolean;
  /** How long the balance lasts at this price (null when it is free). */
  hours_affordable: number | null;
  /** Hosts taking placements with at least this many free GPUs now. */
  hosts_with_room: number;
}

export interface LaunchQuote {
  balance: number;
  credits_per_gpu_hour: number;
  options: LaunchOption[];
  capacity: { free_gpus: number; largest_free: number; gpu_model: string | null; queued: number };
  launch_rate: { windows: { seconds: number; max: number; used: number; remaining: number }[]; retry_after_seconds: number };
}

/** Hosts that take placements now (connected, not reconciling, not draining), with their free GPUs. */
async function openHosts(ctx: InstanceContext, freeGpus: (c: AgentConnection) => Promise<number>): Promise<{ conn: AgentConnection; free: number }[]> {
  const open = [...ctx.agents.values()].filter((c) => c.connected && !c.reconciling && !c.draining);
  return Promise.all(open.map(async (conn) => ({ conn, free: Math.max(0, await freeGpus(conn)) })));
}

export async function launchQuote(
  ctx: InstanceContext,
  accountId: number,
  windows: RateWindow[],
  freeGpus: (c: AgentConnection) => Promise<number>,
  waitMs: number,
): Promise<LaunchQuote> {
  const now = ctx.clock.now();
  const balance = await ctx.store.ledger.balance(accountId);
  const price = ctx.settings.instanceCreditsPerGpuHour;
  const hosts = await openHosts(ctx, freeGpus);
  const options = GPU_COUNTS.map((n) => ({
    gpu_count: n,
    credits_per_hour: price * n,
    min_balance: n,
    affordable: balance >= n,
    hours_affordable: price > 0 ? Math.max(0, balance) / (price * n) : null,
    hosts_with_room: hosts.filter((h) => h.free >= n).length,
  }));
  const longest = Math.max(0, ...windows.map((w) => w.ms));
  const times = await ctx.store.instances.launchTimes(accountId, now - longest);
  return {
    balance,
    credits_per_gpu_hour: price,
    options,
    capacity: {
      free_gpus: hosts.reduce((s, h) => s + h.free, 0),
      largest_free: Math.max(0, ...hosts.map((h) => h.free)),
      gpu_model: hosts.find((h) => h.conn.host?.gpus[0])?.conn.host?.gpus[0]?.model ?? null,
      queued: (await ctx.store.instances.queue()).length,
    },
    launch_rate: {
      windows: windows.map((w) => {
        const used = times.filter((t) => t > now - w.ms).length;
        return { seconds: w.ms / 1000, max: w.max, used, remaining: Math.max(0, w.max - used) };
      }),
      retry_after_seconds: waitMs > 0 ? Math.max(1, Math.ceil(waitMs / 1000)) : 0,
    },
  };
}
