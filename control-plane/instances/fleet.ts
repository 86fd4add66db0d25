// The operator's view of the GPU hosts: `rc host add|list|drain|resume|remove` and the same admin
// API operations. Against a running control plane (LiveFleet) a change takes effect at once: an
// added host is dialled, a drained one gets no new placements, a removed one is hung up on.
// Without one (StoredFleet: the rc CLI on the database) only the registry changes, and the next
// control-plane start acts on it.
import { API_ERRORS } from '../errors.js';
import type { Gpu } from '../../agent/types.js';
import type { AgentConnection } from './agents.js';
import type { Store } from '../store.js';
import type { HostRecord, HostStore } from './host-store.js';
import type { InstanceService } from './service.js';
import type { InstanceRow, InstanceStore } from './store.js';

/** connected / unreachable from the control plane's stream to the agent; draining wins over both; unknown: no control plane runs. */
/** `reconciling`: connected, and comparing its instances with the database; nothing is placed on it until that ends. */
export type HostState = 'connected' | 'reconciling' | 'unreachable' | 'draining' | 'unknown';

export interface HostView {
  name: string;
  address: string;
  state: HostState;
  connected: boolean | null;
  draining: boolean;
  /** false: given at start (the embedded local agent), not in the registry. */
  registered: boolean;
  gpus_total: number | null;
  gpus_free: number | null;
  gpu_model: string | null;
  /**
   * Every GPU as the host last reported it (null: never reported), with its holder and its last
   * telemetry sample (utilization %, memory in use; null for simulated GPUs, with sampling off,
   * or while the host's nvidia-smi fails: agent/README.md "GPU telemetry").
   */
  gpus: HostGpuView[] | null;
  /** Since when the control plane has not heard from the host (ISO time); null while connected. */
  unreachable_since: string | null;
  /** Why it is not connected, in words (the last dial or stream failure); null while connected or not known yet. */
  unreachable_reason: string | null;
  /** The last time the host answered (ISO); null when it never did. */
  last_contact_at: string | null;
  instances: { instance_id: string; account_id: number; state: string; message: string; gpu_count: number }[];
}

export interface HostGpuView {
  index: number;
  /** nvidia-smi's GPU UUID; null for simulated GPUs. */
  uuid: string | null;
  model: string;
  memory_mb: number;
  instance_id: string | null;
  utilization_pct: number | null;
  memory_used_mb: number | null;
  sampled_at: string | null;
}

const gpuViews = (gpus: Gpu[]): HostGpuView[] =>
  gpus.map((g) => ({
    index: g.index,
    uuid: g.uuid ?? null,
    model: g.model,
    memory_mb: g.memoryMb,
    instance_id: g.instanceId || null,
    utilization_pct: g.usage?.utilizationPct ?? null,
    memory_used_mb: g.usage?.memoryUsedMb ?? null,
    sampled_at: g.usage ? new Date(g.usage.sampledAtMs).toISOString() : null,
  }));

export interface HostInput {
  name: string;
  address: string;
  token: string;
}

export interface FleetControl {
  add(input: HostInput): Promise<HostView>;
  list(): Promise<HostView[]>;
  setDraining(name: string, draining: boolean): Promise<HostView>;
  remove(name: string, force: boolean): Promise<{ removed: string; ended_instances: string[] }>;
}

const instancesOf = (rows: InstanceRow[]): HostView['instances'] =>
  rows.map((r) => ({ instance_id: r.id, account_id: r.account_id, state: r.state, message: r.message, gpu_count: r.gpu_count }));

function stillRunning(name: string, rows: InstanceRow[]) {
  return API_ERRORS.hostBusy(
    name,
    rows.map((r) => r.id),
  );
}

/** The registry against the running instance service. */
export class LiveFleet implements FleetControl {
  constructor(private readonly service: InstanceService) {}

  /** The host's connection; 404 when there is no such host. */
  private conn(name: string): AgentConnection {
    const conn = this.service.agents.get(name);
    if (!conn) throw API_ERRORS.hostNotFound(name);
    return conn;
  }

  private async view(name: string): Promise<HostView> {
    const conn = this.conn(name);
    const rows = await this.service.instances.onAgent(name);
    const gpus = conn.host?.gpus;
    return {
      name,
      address: conn.address,
      state: conn.draining ? 'draining' : !conn.connected ? 'unreachable' : conn.reconciling ? 'reconciling' : 'connected',
      connected: conn.connected,
      draining: conn.draining,
      registered: conn.registered,
      gpus_total: gpus ? gpus.length : null,
      gpus_free: gpus ? Math.max(0, await this.service.freeGpus(conn)) : null,
      gpu_model: gpus?.[0]?.model ?? null,
      gpus: gpus ? gpuViews(gpus) : null,
      unreachable_since: conn.connected ? null : new Date(conn.downSince).toISOString(),
      unreachable_reason: conn.connected ? null : conn.downReason,
      last_contact_at: conn.lastContactAt === null ? null : new Date(conn.lastContactAt).toISOString(),
      instances: instancesOf(rows),
    };
  }

  async add(input: HostInput): Promise<HostView> {
    const existing = this.service.agents.get(input.name);
    if (existing && !existing.registered) throw API_ERRORS.hostStatic(input.name, 'replaced');
    const stored = await this.service.hosts.put(input.name, input.address, input.token);
    this.service.attachHost({ id: input.name, address: input.address, token: input.token, draining: stored.draining, registered: true });
    this.service.hostsChanged();
    return this.view(input.name);
  }

  list(): Promise<HostView[]> {
    return Promise.all([...this.service.agents.keys()].sort().map((n) => this.view(n)));
  }

  async setDraining(name: string, draining: boolean): Promise<HostView> {
    const conn = this.conn(name);
    if (conn.registered) await this.service.hosts.setDraining(name, draining);
    conn.draining = draining;
    if (conn.registered) this.service.hostsChanged();
    if (!draining) await this.service.schedule();
    return this.view(name);
  }

  async remove(name: string, force: boolean): Promise<{ removed: string; ended_instances: string[] }> {
    const conn = this.conn(name);
    if (!conn.registered) throw API_ERRORS.hostStatic(name, 'removed');
    const rows = await this.service.instances.onAgent(name);
    if (rows.length && !force) throw stillRunning(name, rows);
    if (rows.length) await this.service.endOnHost(name);
    await this.service.hosts.remove(name);
    await this.service.detachHost(name);
    this.service.hostsChanged();
    return { removed: name, ended_instances: rows.map((r) => r.id) };
  }
}

/** The registry in the database only (no control plane runs): changes apply at its next start. */
export class StoredFleet implements FleetControl {
  private readonly hosts: HostStore;
  private readonly instances: InstanceStore;

  constructor(store: Store) {
    this.hosts = store.hosts;
    this.instances = store.instances;
  }

  private async view(h: HostRecord): Promise<HostView> {
    return {
      name: h.name,
      address: h.address,
      state: h.draining ? 'draining' : 'unknown',
      connected: null,
      draining: h.draining,
      registered: true,
      gpus_total: null,
      gpus_free: null,
      gpu_model: null,
      gpus: null,
      unreachable_since: null,
      unreachable_reason: null,
      last_contact_at: null,
      instances: instancesOf(await this.instances.onAgent(h.name)),
    };
  }

  private async get(name: string): Promise<HostRecord> {
    const h = await this.hosts.get(name);
    if (!h) throw API_ERRORS.hostNotFound(name);
    return h;
  }

  async add(input: HostInput): Promise<HostView> {
    return this.view(await this.hosts.put(input.name, input.address, input.token));
  }

  async list(): Promise<HostView[]> {
    return Promise.all((await this.hosts.list()).map((h) => this.view(h)));
  }

  async setDraining(name: string, draining: boolean): Promise<HostView> {
    if (!(await this.hosts.setDraining(name, draining))) throw API_ERRORS.hostNotFound(name);
    return this.view(await this.get(name));
  }

  async remove(name: string, force: boolean): Promise<{ removed: string; ended_instances: string[] }> {
    await this.get(name);
    const rows = await this.instances.onAgent(name);
    if (rows.length && !force) throw stillRunning(name, rows);
    // Ending instances bills them and tells their agent: that needs the running control plane.
    if (rows.length) throw API_ERRORS.hostBusy(name, undefined);
    await this.hosts.remove(name);
    return { removed: name, ended_instances: [] };
  }
}
