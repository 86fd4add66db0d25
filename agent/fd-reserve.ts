// Descriptors held back for the agent's own bookkeeping (issue 44: at the platform process's
// descriptor limit, reached by a tenant's tunnel loop, the agent's state-file writes and firewall
// refresh failed with EMFILE). The reserve keeps RESERVED_DESCRIPTORS descriptors open on
// /dev/null and hands them back around an operation that must not fail for want of one: the
// reserve is closed, the operation's synchronous part runs (a file written and renamed, a child
// process spawned: its pipes are made before the call returns), then the reserve is refilled
// with whatever is free. Nothing else can take the freed descriptors in between: JavaScript runs
// to completion, and the event loop (which accepts connections) does not turn meanwhile.
// The tenant-facing limits (gateway/tunnel/limits.ts, agent/broker-relay.ts) are what keep the
// process away from its limit; this is for when something else brings it there anyway.
import { closeSync, openSync } from 'node:fs';

/** Descriptors held back: a state write needs 1, an iptables child 3 pipes (6 until it starts). */
export const RESERVED_DESCRIPTORS = 16;

export class DescriptorReserve {
  private readonly fds: number[] = [];

  /** Empty until first used (`around` fills it afterwards): a process that never needs it holds nothing. */
  constructor(readonly size = RESERVED_DESCRIPTORS) {}

  /** Descriptors held now (fewer than `size` while the process is at its limit). */
  get held(): number {
    return this.fds.length;
  }

  /** Takes free descriptors up to `size` (stops at the first that cannot be opened). */
  refill(): void {
    while (this.fds.length < this.size) {
      try {
        this.fds.push(openSync('/dev/null', 'r'));
      } catch {
        return;
      }
    }
  }

  /** Runs `fn` with the reserve's descriptors free for it, and refills the reserve after its synchronous part. */
  around<T>(fn: () => T): T {
    for (const fd of this.fds.splice(0)) {
      try {
        closeSync(fd);
      } catch {
        // closed already: nothing to give back
      }
    }
    try {
      return fn();
    } finally {
      this.refill();
    }
  }
}

/** The agent process's reserve (one per process: the limit is the process's). */
export const descriptorReserve = new DescriptorReserve();
