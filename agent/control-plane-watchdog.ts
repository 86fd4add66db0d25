// The lost control plane: the control plane is "present" while it calls or keeps a watch stream
// open. After `graceMs` of silence the agent stops every active instance on its own (state
// `stopped`, reason `control_plane_lost`), so nothing runs on unbilled.
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/log.js';
import { StopReason } from './errors.js';
import type { Supervisor } from './supervisor.js';

export interface ControlPlaneWatchdogOptions {
  supervisor: Supervisor;
  clock: Clock;
  /** Silence after which every instance stops; 0 never. */
  graceMs: number;
  logger: Logger;
}

export class ControlPlaneWatchdog {
  private lastContact: number;
  private openWatches = 0;
  private stoppingAll = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: ControlPlaneWatchdogOptions) {
    this.lastContact = o.clock.now();
  }

  /** An authenticated call or a heartbeat on an open watch stream. */
  contact(): void {
    this.lastContact = this.o.clock.now();
  }

  watchOpened(): void {
    this.openWatches++;
  }

  watchClosed(): void {
    this.openWatches--;
    this.contact();
  }

  /** Checks the silence a few times per grace period (between 50 ms and 1 s); nothing when the grace is 0. */
  start(): void {
    const { graceMs } = this.o;
    if (graceMs <= 0 || this.timer) return;
    this.timer = setInterval(() => this.check(), Math.max(50, Math.min(1000, Math.floor(graceMs / 4))));
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private check(): void {
    const { supervisor, clock, graceMs, logger } = this.o;
    if (this.stoppingAll || this.openWatches > 0 || clock.now() - this.lastContact <= graceMs || !supervisor.hasActive()) return;
    this.stoppingAll = true;
    logger.warn('control plane lost: stopping every instance', { silentMs: clock.now() - this.lastContact });
    void supervisor.stopAll(StopReason.controlPlaneLost).finally(() => {
      this.stoppingAll = false;
    });
  }
}
