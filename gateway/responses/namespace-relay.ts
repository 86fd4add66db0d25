// Giving namespace functions' calls back their namespace (tools.ts flattened them for the
// backend): a function_call of `multi_agent_v1__spawn_agent` reaches the client as OpenAI writes
// it, `{"type": "function_call", "name": "spawn_agent", "namespace": "multi_agent_v1", ...}`, in
// the non-stream body and in every streamed event that carries the call (output_item.added and
// .done, function_call_arguments.done's `name`, the response object of response.created /
// .in_progress / .completed, whose `tools` echo becomes the client's own list again).
//
// It sits in front of the chat relay (relay.ts) as the backend's handler, only on requests that
// had namespace functions; every other request is relayed as bytes. A stream is cut at event
// boundaries; an event is parsed only when its bytes hold one of the flat names (quoted), and
// re-serialized only when something in it was changed. A non-stream body is read whole first.
// Error statuses go to the chat relay untouched (it answers them in the chat shape).
import type { HeaderLines } from '../../lib/relay/http-pool.js';
import type { ChatRelay } from '../chat/relay.js';
import type { UpstreamError, UpstreamHandler } from '../backends/upstreams.js';
import type { NamespaceNames } from './tools.js';

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Rewrites a backend's Responses JSON (a response object or a stream event) for the client. */
export class NamespaceRestorer {
  /** Each flat name as it appears in JSON, quoted (tools.ts keeps them to characters JSON never escapes). */
  private readonly quoted: string[];
  private readonly needles: Buffer[];

  constructor(private readonly names: NamespaceNames) {
    this.quoted = [...names.byFlat.keys()].map((n) => JSON.stringify(n));
    this.needles = this.quoted.map((q) => Buffer.from(q));
  }

  /** The bytes hold a flat name (only then can anything need a change). */
  mentions(buf: Buffer): boolean {
    for (const n of this.needles) if (buf.indexOf(n) >= 0) return true;
    return false;
  }

  /** A function_call item of a flat name: the client's name and namespace. True when changed. */
  restoreItem(item: unknown): boolean {
    if (!isRecord(item) || item.type !== 'function_call' || typeof item.name !== 'string') return false;
    const n = this.names.byFlat.get(item.name);
    if (!n) return false;
    item.name = n.name;
    item.namespace = n.namespace;
    return true;
  }

  /** A response object: its output's calls, and its `tools` echo (the client's list). */
  restoreResponse(r: unknown): boolean {
    if (!isRecord(r)) return false;
    let changed = false;
    if (Array.isArray(r.output)) for (const item of r.output) changed = this.restoreItem(item) || changed;
    if (Array.isArray(r.tools)) {
      r.tools = this.names.clientTools;
      changed = true;
    }
    return changed;
  }

  /** One stream event's data. */
  restoreEvent(e: unknown): boolean {
    if (!isRecord(e)) return false;
    let changed = false;
    if (e.response !== undefined) changed = this.restoreResponse(e.response) || changed;
    if (e.item !== undefined) changed = this.restoreItem(e.item) || changed;
    if (e.type === 'response.function_call_arguments.done' && typeof e.name === 'string') {
      const n = this.names.byFlat.get(e.name);
      if (n) {
        e.name = n.name;
        changed = true;
      }
    }
    return changed;
  }

  /** A whole non-stream body, rewritten (or as it came when nothing changed or it is not JSON). */
  body(raw: Buffer): Buffer | string {
    if (!this.mentions(raw)) return raw;
    try {
      const v: unknown = JSON.parse(raw.toString('utf8'));
      return this.restoreResponse(v) ? JSON.stringify(v) : raw;
    } catch {
      return raw;
    }
  }

  /**
   * Complete SSE events (`chunk` ends at an event boundary), each rewritten when it holds a flat
   * name. Lines other than `data:` (event:, id:, comments) are kept as they are.
   */
  events(chunk: Buffer): Buffer | string {
    if (!this.mentions(chunk)) return chunk;
    const lines = chunk.toString('utf8').split('\n');
    let changed = false;
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!;
      if (!line.startsWith('data:') || !this.quoted.some((q) => line.includes(q))) continue;
      const cr = line.endsWith('\r') ? '\r' : '';
      const data = line.slice(line[5] === ' ' ? 6 : 5, line.length - cr.length);
      let e: unknown;
      try {
        e = JSON.parse(data);
      } catch {
        continue; // not JSON: left as it came
      }
      if (!this.restoreEvent(e)) continue;
      lines[i] = `data: ${JSON.stringify(e)}${cr}`;
      changed = true;
    }
    return changed ? lines.join('\n') : chunk;
  }
}

/**
 * The backend's handler for a request with namespace functions: rewrites what the backend sends,
 * then hands it to the chat relay (which scans usage, writes, settles). Backpressure and aborts
 * are the chat relay's (its `call` is the backend call).
 */
export class NamespaceRelay implements UpstreamHandler {
  private ok = false;
  private carry: Buffer | undefined;
  private parts: Buffer[] | undefined;

  constructor(
    private readonly inner: ChatRelay,
    private readonly restorer: NamespaceRestorer,
    private readonly stream: boolean,
  ) {}

  onHead(status: number, headers: HeaderLines): void {
    this.ok = status === 200;
    if (this.ok && !this.stream) this.parts = [];
    this.inner.onHead(status, headers);
  }

  onData(chunk: Buffer): boolean {
    if (!this.ok) return this.inner.onData(chunk);
    if (this.parts) {
      this.parts.push(chunk);
      return true;
    }
    let data = this.carry ? Buffer.concat([this.carry, chunk]) : chunk;
    this.carry = undefined;
    const cut = lastEventEnd(data);
    if (cut < data.length) {
      this.carry = Buffer.from(data.subarray(cut)); // an unfinished event waits for the rest
      if (cut === 0) return true;
      data = data.subarray(0, cut);
    }
    const out = this.restorer.events(data);
    return this.inner.onData(typeof out === 'string' ? Buffer.from(out) : out);
  }

  onEnd(): void {
    if (this.parts) {
      const body = this.restorer.body(Buffer.concat(this.parts));
      this.inner.onData(typeof body === 'string' ? Buffer.from(body) : body);
    } else if (this.carry) this.inner.onData(this.carry);
    this.inner.onEnd();
  }

  onError(err: UpstreamError): void {
    this.inner.onError(err);
  }
}

/** The index just past the last blank line (`\n\n`, or `\n\r\n`) of `buf`, or 0. */
function lastEventEnd(buf: Buffer): number {
  for (let i = buf.length - 1; i > 0; i--) {
    if (buf[i] !== 0x0a) continue;
    if (buf[i - 1] === 0x0a) return i + 1;
    if (buf[i - 1] === 0x0d && i >= 2 && buf[i - 2] === 0x0a) return i + 1;
  }
  return 0;
}
