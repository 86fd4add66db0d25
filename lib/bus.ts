// The event channel between the control plane and the gateways: key issued or revoked, account
// limits changed, catalog or instance routes changed. In-process in embedded mode; Redis
// pub/sub when REDIS_URL is set, so that every gateway process hears every event.
import { TIMED_OUT, within } from './within.js';
import { EventEmitter } from 'node:events';
import { Redis } from 'ioredis';
import type { InstanceRouteWire } from './gateway-snapshot.js';

export type BusEvent =
  | { type: 'key.issued'; keyHash: string; accountId: number }
  | { type: 'key.revoked'; keyHash: string; accountId: number }
  /** `limits`, when present, carries the account's gate overrides (null: back to the defaults); see gateway/gates/README.md. */
  | { type: 'account.changed'; accountId: number; limits?: { rpm?: number | null; tpm?: number | null; dailyTokens?: number | null } | null }
  /**
   * A browser session began (sign-up or sign-in): the gateway accepts it on the shared model
   * routes, unless `modelAccess` is false (an account under review while their cap is 0). Hashes are SHA-256 hex.
   */
  | { type: 'session.started'; tokenHash: string; csrfHash: string; accountId: number; expiresAt: number; modelAccess?: boolean }
  | { type: 'session.ended'; tokenHash: string }
  | { type: 'catalog.changed' }
  /**
   * The hosts registry changed (`rc host add`, drain, resume, remove through one control plane):
   * the others on the same database bring their agent connections in line with it.
   */
  | { type: 'hosts.changed' }
  /** `route`: where the instance is reachable now (null: no longer live), so gateways update their table without a lookup. */
  | { type: 'instance.changed'; instanceId: string; route?: InstanceRouteWire | null }
  /** A gateway replica saw traffic to the instance (throttled per replica): the control plane resets its idle timer. */
  | { type: 'instance.activity'; instanceId: string }
  /**
   * A gateway's tunnel broker (`brokerId`: one per broker process) opened or closed a tunnel, and,
   * every few seconds, the whole list it holds (`tunnels.live`): the control plane lists an
   * instance's tunnels from them (control-plane/instances/live-tunnels.ts). Each report holds for
   * `ttlMs`, so the tunnels of a broker that died without a word go with it.
   */
  | ({ type: 'tunnel.opened'; brokerId: string; ttlMs: number } & TunnelReport)
  | { type: 'tunnel.closed'; brokerId: string; instanceId: string; tunnelId: string }
  | { type: 'tunnels.live'; brokerId: string; ttlMs: number; tunnels: TunnelReport[] };

/** One tunnel as a broker reports it: whose, which port inside the instance, and its public URL. */
export interface TunnelReport {
  instanceId: string;
  tunnelId: string;
  port: number;
  publicUrl: string;
}

export interface Bus {
  /**
   * Resolves once this process's subscribers have heard the event (MemoryBus: at once; RedisBus:
   * its echo through Redis, or after ECHO_WAIT_MS without it). A reply that must not go out
   * before the gateway knows what it announces (a new session) awaits it.
   */
  publish(event: BusEvent): Promise<void>;
  /** Calls `listener` for every event published after this call (by any process on the bus). */
  subscribe(listener: (event: BusEvent) => void): () => void;
  close(): Promise<void>;
}

/** One process: events are delivered synchronously to the subscribers of this bus. */
export class MemoryBus implements Bus {
  private readonly emitter = new EventEmitter().setMaxListeners(0);
  async publish(event: BusEvent): Promise<void> {
    this.emitter.emit('event', event);
  }
  subscribe(listener: (event: BusEvent) => void): () => void {
    this.emitter.on('event', listener);
    return () => this.emitter.off('event', listener);
  }
  async close(): Promise<void> {
    this.emitter.removeAllListeners();
  }
}

/**
 * The Redis channel of a platform's events: under the prefix of everything it keeps in Redis
 * (RC_GATE_KEY_PREFIX, `rc:` by default, so `rc:events`). Platforms sharing one Redis under
 * different prefixes do not hear each other: account ids are small integers in every database,
 * and one platform's `account.changed` would otherwise set the limits of the other's account of
 * the same id.
 */
export function busChannel(keyPrefix: string): string {
  return `${keyPrefix}events`;
}

/** The longest a RedisBus publish waits for its own echo (a subscription that is down must not hold replies). */
export const ECHO_WAIT_MS = 1000;

/** Redis pub/sub: one connection publishes, one subscribes. Local subscribers hear their own process's events through Redis too. */
export class RedisBus implements Bus {
  private readonly pub: Redis;
  private readonly sub: Redis;
  private readonly local = new MemoryBus();
  private readonly ready: Promise<unknown>;
  /** Messages published here and not heard back yet -> who waits for each copy, in order. */
  private readonly echoes = new Map<string, (() => void)[]>();

  constructor(
    url: string,
    /** busChannel(config.gateKeyPrefix) */
    private readonly channel: string,
  ) {
    this.pub = new Redis(url, { maxRetriesPerRequest: 1, enableOfflineQueue: true });
    this.sub = new Redis(url, { maxRetriesPerRequest: null });
    this.pub.on('error', () => {});
    this.sub.on('error', () => {});
    this.sub.on('message', (_ch: string, message: string) => {
      let ev: BusEvent;
      try {
        ev = JSON.parse(message) as BusEvent;
      } catch {
        return;
      }
      void this.local.publish(ev);
      this.heard(message);
    });
    this.ready = this.sub.subscribe(this.channel);
    // Closing before the subscription is active rejects `ready`; whenReady() still reports it.
    this.ready.catch(() => {});
  }

  /** Resolves once the subscription is active. */
  whenReady(): Promise<unknown> {
    return this.ready;
  }

  async publish(event: BusEvent): Promise<void> {
    const message = JSON.stringify(event);
    // Waited for from before the PUBLISH: the echo may come in before its reply.
    let done!: () => void;
    const echo = new Promise<void>((resolve) => (done = resolve));
    const waiting = this.echoes.get(message);
    if (waiting) waiting.push(done);
    else this.echoes.set(message, [done]);
    try {
      await this.pub.publish(this.channel, message);
    } catch (err) {
      this.forget(message, done);
      throw err;
    }
    // The subscribers of this process (the embedded gateway's sessions, keys, routes) have it once
    // the subscription delivered it; a sign-in answered before that was refused at the gateway.
    if ((await within(echo, ECHO_WAIT_MS)) === TIMED_OUT) this.forget(message, done);
  }

  /** The subscription delivered `message`: the oldest publish of it waiting here resolves. */
  private heard(message: string): void {
    const waiting = this.echoes.get(message);
    if (!waiting) return;
    waiting.shift()!();
    if (waiting.length === 0) this.echoes.delete(message);
  }

  private forget(message: string, done: () => void): void {
    const waiting = this.echoes.get(message);
    if (!waiting) return;
    const i = waiting.indexOf(done);
    if (i >= 0) waiting.splice(i, 1);
    if (waiting.length === 0) this.echoes.delete(message);
  }
  subscribe(listener: (event: BusEvent) => void): () => void {
    return this.local.subscribe(listener);
  }
  async close(): Promise<void> {
    await this.local.close();
    this.pub.disconnect();
    this.sub.disconnect();
  }
}
