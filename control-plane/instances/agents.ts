// One connection per configured host agent: a WatchEvents stream kept open (reconnecting with
// backoff), the host's inventory, and whether the host currently answers. Work on one agent
// (reconciliation, event handling) runs through its serial queue, so it never interleaves.
import { setTimeout as sleep } from 'node:timers/promises';
import { createAgentClient, type AgentClient } from '../../agent/client.js';
import type { HostInfo, InstanceEvent } from '../../agent/types.js';
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/log.js';

export interface AgentConfig {
  /** Stable name of the host in the control plane (stored with each instance placed there). */
  id: string;
  /** host:port of its gRPC server. */
  address: string;
  token: string;
  /** TLS CA (PEM) of the agent's certificate; plaintext when absent. */
  tlsCa?: Buffer;
  /** No new placements on this host (`rc host drain`); its running instances stay. */
  draining?: boolean;
  /** Registered with `rc host add` (stored in the hosts table) rather than given at start. */
  registered?: boolean;
}

export interface AgentHandlers {
  /** The stream is (re)established: reconcile. */
  onConnect(conn: AgentConnection): Promise<void>;
  onEvent(conn: AgentConnection, event: InstanceEvent): Promise<void>;
  /** The host's GPU assignment changed (capacity may have freed). */
  onHost(conn: AgentConnection): void;
}

/** Default: a stream silent this long (the agent heartbeats every 5 s) is torn down and redialled. */
export const DEFAULT_STALL_MS = 20_000;
const MAX_BACKOFF_MS = 2_000;
/**
 * A dial that has not produced the host's first item by then is abandoned and the next one uses a
 * fresh channel: a connect begun while the link was down hangs in SYN retransmits (seconds apart)
 * even after the link is back, and calls on that channel wait for it.
 */
const DIAL_TIMEOUT_MS = 3_000;

/** A failed dial or stream in words for the operator's hosts page (read-only; see watchLoop). */
function downReason(err: unknown, stalled: boolean): string {
  if (stalled) return 'no heartbeat: the stream went silent and was redialled';
  // gRPC's message ends in an empty "Resolution note:" for an address that resolved.
  return (err instanceof Error ? err.message : String(err)).replace(/\s*Resolution note:\s*$/, '').slice(0, 300);
}

export class AgentConnection {
  readonly id: string;
  readonly address: string;
  readonly registered: boolean;
  draining: boolean;
  host: HostInfo | undefined;
  connected = false;
  /** True while a reconciliation runs: nothing is placed on the host meanwhile. */
  reconciling = false;
  /** Service-clock time since when the host has not answered (set before the first connection). */
  downSince: number;
  /** Why the host is not connected (the last dial or stream failure, in words); null while connected or before the first try ends. */
  downReason: string | null = null;
  /** Service-clock time of the last item from the host; null when it never answered. */
  lastContactAt: number | null = null;
  private lastItemAt = 0;
  /** Set when checkStall tore the stream down: the host has been silent since lastItemAt. */
  private stalled = false;
  private closed = false;
  private stream: AbortController | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private loop: Promise<void> | undefined;
  private readonly stop = new AbortController();
  private current: AgentClient;

  constructor(
    private readonly config: AgentConfig,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly handlers: AgentHandlers,
    private readonly stallMs = DEFAULT_STALL_MS,
  ) {
    this.id = config.id;
    this.address = config.address;
    this.registered = config.registered ?? false;
    this.draining = config.draining ?? false;
    this.current = this.dial();
    this.downSince = clock.now();
  }

  /** True when this connection dials `address` with `token` (the registry's row is unchanged). */
  dials(address: string, token: string): boolean {
    return this.config.address === address && this.config.token === token;
  }

  /** The gRPC client of the host (replaced by a fresh channel after a dial that did not connect). */
  get client(): AgentClient {
    return this.current;
  }

  private dial(): AgentClient {
    return createAgentClient({ address: this.config.address, token: this.config.token, tlsCa: this.config.tlsCa, timeoutMs: 15_000 });
  }

  /** Runs `fn` after everything queued before it on this agent. */
  run<T>(fn: () => Promise<T> | T): Promise<T> {
    const p = this.queue.then(fn);
    this.queue = p.catch((err: unknown) => this.log.warn('agent task failed', { agent: this.id, err }));
    return p;
  }

  start(): void {
    this.loop ??= this.watchLoop();
  }

  /** Tears the stream down; the loop dials again and reconciles. */
  redial(): void {
    this.stream?.abort();
  }

  /** Called by the service's tick: a stream without heartbeats is presumed dead. */
  checkStall(): void {
    if (this.connected && Date.now() - this.lastItemAt > this.stallMs) {
      this.log.warn('agent stream stalled; redialling', { agent: this.id });
      this.stalled = true;
      this.redial();
    }
  }

  private async watchLoop(): Promise<void> {
    let backoff = 100;
    while (!this.closed) {
      const stream = (this.stream = new AbortController());
      let answered = false;
      const dialTimer = setTimeout(() => {
        if (!answered) stream.abort();
      }, DIAL_TIMEOUT_MS);
      try {
        for await (const item of this.client.watch({ signal: stream.signal })) {
          answered = true;
          this.lastItemAt = Date.now();
          this.lastContactAt = this.clock.now();
          this.downReason = null;
          if (item.kind === 'host') {
            this.host = item.host;
            if (!this.connected) {
              this.connected = true;
              backoff = 100;
              this.log.info('agent connected', { agent: this.id, gpus: item.host.gpus.length });
              void this.run(() => this.handlers.onConnect(this));
            } else {
              this.handlers.onHost(this);
            }
          } else if (item.kind === 'event') {
            const event = item.event;
            void this.run(() => this.handlers.onEvent(this, event));
          }
        }
      } catch (err) {
        if (!this.closed && this.connected) this.log.warn('agent stream ended', { agent: this.id, err });
        if (!this.closed) this.downReason = downReason(err, this.stalled);
      } finally {
        clearTimeout(dialTimer);
      }
      // An aborted stream ends without an error (client-calls.ts): the dial timer gave up on it.
      if (!answered && !this.closed && stream.signal.aborted) {
        this.downReason = `no answer within ${DIAL_TIMEOUT_MS / 1000} s (address unreachable, or not an agent)`;
      }
      if (!answered && !this.closed) {
        const old = this.current;
        this.current = this.dial();
        old.close();
      }
      if (this.connected) {
        this.connected = false;
        this.downReason ??= 'the host ended the stream';
        // A stalled stream (a cut link sends no reset) went silent at its last item, not now.
        this.downSince = this.clock.now() - (this.stalled ? Date.now() - this.lastItemAt : 0);
      }
      this.stalled = false;
      if (this.closed) break;
      await sleep(backoff, undefined, { signal: this.stop.signal }).catch(() => {});
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.stop.abort();
    this.stream?.abort();
    await this.loop;
    await this.queue.catch(() => {});
    this.client.close();
  }
}
