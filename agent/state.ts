// The agent's record of what it runs: one small JSON file, rewritten atomically (temp file +
// rename) on every change, so that an agent restarted on the same data dir adopts its instances.
import { descriptorReserve } from './fd-reserve.js';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { INSTANCE_STATES } from './types.js';
import type { InstanceInfo } from './types.js';

/** What a runtime needs to find its instance again: pid + start time, or a container id. */
export type RuntimeRef = Record<string, string | number>;

export interface InstanceRecord {
  /** Status as reported; `spec.files` holds paths with empty contents (contents are never stored). */
  info: InstanceInfo;
  /** SHA-256 of the whole launch spec as received, for idempotent StartInstance. */
  specHash: string;
  /** Set once the runtime started the instance. */
  ref?: RuntimeRef;
}

export interface AgentState {
  version: 1;
  agentId: string;
  /** Sequence number of the last event; continues across restarts. */
  seq: number;
  instances: Record<string, InstanceRecord>;
}

const specSchema = z.object({
  instanceId: z.string(),
  image: z.string(),
  instanceType: z.string(),
  startCommand: z.string(),
  env: z.record(z.string(), z.string()),
  ports: z.array(z.number()),
  gpuCount: z.number(),
  diskGb: z.number(),
  sshPublicKey: z.string(),
  volume: z.string(),
  files: z.record(z.string(), z.unknown()).transform((f) => Object.fromEntries(Object.keys(f).map((k) => [k, new Uint8Array()]))),
  readyTimeoutMs: z.number(),
});

const recordSchema = z.object({
  info: z.object({
    instanceId: z.string(),
    state: z.enum(INSTANCE_STATES),
    message: z.string(),
    reason: z.string(),
    detail: z.string(),
    seq: z.number(),
    createdAtMs: z.number(),
    updatedAtMs: z.number(),
    runtime: z.enum(['process', 'docker']),
    gpus: z.array(z.number()),
    endpoints: z.array(z.object({ port: z.number(), host: z.string(), hostPort: z.number() })),
    spec: specSchema,
    runtimeId: z.string(),
  }),
  specHash: z.string(),
  ref: z.record(z.string(), z.union([z.string(), z.number()])).optional(),
});

const stateSchema = z.object({
  version: z.literal(1),
  agentId: z.string().min(1),
  seq: z.number().int().min(0),
  instances: z.record(z.string(), recordSchema),
});

export class StateStore {
  readonly path: string;
  readonly state: AgentState;

  /** Loads `<dir>/state.json`, or starts an empty state with a new agent id. A corrupt file stops start-up. */
  constructor(
    readonly dir: string,
    newAgentId: () => string,
  ) {
    mkdirSync(dir, { recursive: true });
    this.path = join(dir, 'state.json');
    if (existsSync(this.path)) {
      const parsed = stateSchema.safeParse(JSON.parse(readFileSync(this.path, 'utf8')));
      if (!parsed.success) throw new Error(`Corrupt agent state file ${this.path}: ${parsed.error.message}`);
      this.state = parsed.data as AgentState;
    } else {
      this.state = { version: 1, agentId: newAgentId(), seq: 0, instances: {} };
      this.save();
    }
  }

  save(): void {
    const tmp = `${this.path}.${process.pid}.tmp`;
    const text = JSON.stringify(this.state, (_k, v: unknown) => (v instanceof Uint8Array ? '' : v));
    // With the descriptors held back for it: the state must be written even at the process's limit.
    descriptorReserve.around(() => {
      writeFileSync(tmp, text);
      renameSync(tmp, this.path);
    });
  }
}
