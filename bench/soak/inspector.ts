// The soak's line into the platform process it measures: V8's inspector protocol over the
// websocket that `node --inspect=127.0.0.1:0` opens (only the soak's child is started so; the
// platform itself never is). Through it the soak asks for a full collection before each quiet
// sample, so an RSS sample reads what the process retains rather than how far its garbage has
// piled up since the last major GC (a sawtooth of 20-30 MB), and takes heap snapshots without a
// signal handler or a snapshot file to wait for.
import WebSocket from 'ws';

interface Reply {
  id?: number;
  method?: string;
  params?: { chunk?: string };
  error?: { message: string };
  result?: unknown;
}

export class Inspector {
  private next = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private chunks: string[] | undefined;

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data) => this.onMessage(JSON.parse(String(data)) as Reply));
    ws.on('close', () => {
      for (const p of this.pending.values()) p.reject(new Error('the inspector closed'));
      this.pending.clear();
    });
  }

  /** Connects to the inspector at `url` (the `ws://...` that node prints as "Debugger listening on"). */
  static async connect(url: string): Promise<Inspector> {
    // Snapshots arrive in chunks of about 100 KB: no frame limit that would cut one.
    const ws = new WebSocket(url, { maxPayload: 0, perMessageDeflate: false });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return new Inspector(ws);
  }

  /** A full, compacting collection (V8's HeapProfiler.collectGarbage). */
  async collectGarbage(): Promise<void> {
    await this.call('HeapProfiler.collectGarbage');
  }

  /** V8's heap in use, in bytes (all spaces). */
  async heapUsed(): Promise<number> {
    return ((await this.call('Runtime.getHeapUsage')) as { usedSize: number }).usedSize;
  }

  /** A heap snapshot (V8 collects first), as the text of a `.heapsnapshot` file. */
  async heapSnapshot(): Promise<string> {
    this.chunks = [];
    try {
      await this.call('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
      return this.chunks.join('');
    } finally {
      this.chunks = undefined;
    }
  }

  close(): void {
    this.ws.close();
  }

  private call(method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  private onMessage(m: Reply): void {
    if (m.method === 'HeapProfiler.addHeapSnapshotChunk') {
      this.chunks?.push(m.params?.chunk ?? '');
      return;
    }
    const p = m.id === undefined ? undefined : this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id!);
    if (m.error) p.reject(new Error(`inspector: ${m.error.message}`));
    else p.resolve(m.result);
  }
}
