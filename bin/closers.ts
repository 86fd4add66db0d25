// What the platform assembly started, to close: in reverse order of start, each failure logged
// and the next one closed anyway.
import type { Logger } from '../lib/log.js';

export class Closers {
  private readonly closers: (() => Promise<unknown>)[] = [];

  constructor(private readonly logger: Logger) {}

  add(close: () => Promise<unknown>): void {
    this.closers.push(close);
  }

  async closeAll(): Promise<void> {
    for (const c of this.closers.reverse()) await c().catch((err: unknown) => this.logger.error('close failed', { err }));
  }
}
