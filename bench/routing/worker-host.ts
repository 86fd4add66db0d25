// Parts of the routing benchmark that run on threads of their own (sim-worker.ts, the sims;
// gateway-worker.ts, the gateway replicas), so that the sims' tokenizing, the gateways' parsing
// and the clients do not wait for each other on one event loop: on one thread their event-loop
// lag (100-300 ms with 64 agent-sized conversations) was added to every time to first token
// and compressed the policies' differences. A worker answers requests by id.
import { Worker } from 'node:worker_threads';

/** What a worker is asked: its counters, or to close. */
export type WorkerAsk = { id: number; ask: 'stats' | 'close' };

export class WorkerHost<Ready, Stats> {
  private next = 0;
  private readonly waiting = new Map<number, (value: unknown) => void>();

  private constructor(
    private readonly worker: Worker,
    readonly ready: Ready,
  ) {
    worker.on('message', (m: { id: number; value: unknown }) => {
      this.waiting.get(m.id)?.(m.value);
      this.waiting.delete(m.id);
    });
  }

  /** Starts `file` (a compiled module next to this one) with `data`; resolves with its first message. */
  static start<Ready, Stats>(file: string, data: unknown): Promise<WorkerHost<Ready, Stats>> {
    const worker = new Worker(new URL(file, import.meta.url), { workerData: data });
    return new Promise((resolve, reject) => {
      worker.once('error', reject);
      worker.once('message', (ready: Ready) => {
        worker.off('error', reject);
        resolve(new WorkerHost<Ready, Stats>(worker, ready));
      });
    });
  }

  stats(): Promise<Stats> {
    return this.ask('stats') as Promise<Stats>;
  }

  async close(): Promise<void> {
    await this.ask('close');
    await this.worker.terminate();
  }

  private ask(ask: WorkerAsk['ask']): Promise<unknown> {
    const id = this.next++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.worker.postMessage({ id, ask } satisfies WorkerAsk);
    });
  }
}
