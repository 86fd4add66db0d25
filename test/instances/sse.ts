// A small server-sent events reader for the stream routes' tests: connects with a key, parses
// events as they arrive, and lets a test wait for the next event matching a condition.
import { request } from 'undici';

export interface SseEvent {
  event: string;
  data: string;
}

export interface SseReader {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** Every event received so far. */
  events: SseEvent[];
  /** Resolves with the first event (received or to come) after index `from` for which `match` holds. */
  next(match: (e: SseEvent) => boolean, timeoutMs?: number): Promise<SseEvent>;
  /** Resolves when the server ended the stream. */
  ended: Promise<void>;
  close(): void;
}

export async function openSse(url: string, key: string): Promise<SseReader> {
  const ac = new AbortController();
  const r = await request(url, { headers: { authorization: `Bearer ${key}` }, signal: ac.signal });
  const events: SseEvent[] = [];
  const waiters = new Set<() => void>();
  let seen = 0;
  const ended = (async () => {
    let buf = '';
    try {
      for await (const chunk of r.body) {
        buf += (chunk as Buffer).toString('utf8');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = 'message';
          const data: string[] = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) event = line.slice(7);
            else if (line.startsWith('data: ')) data.push(line.slice(6));
          }
          if (data.length) events.push({ event, data: data.join('\n') });
          for (const w of waiters) w();
        }
      }
    } catch {
      /* closed by the test */
    }
    for (const w of waiters) w();
  })();
  let done = false;
  void ended.then(() => (done = true));
  return {
    status: r.statusCode,
    headers: r.headers,
    events,
    ended,
    next(match, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          for (; seen < events.length; seen++) {
            if (match(events[seen]!)) {
              const e = events[seen++]!;
              cleanup();
              resolve(e);
              return;
            }
          }
          if (done) {
            cleanup();
            reject(new Error(`stream ended without a matching event; got ${JSON.stringify(events)}`));
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`no matching event within ${timeoutMs} ms; got ${JSON.stringify(events)}`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    close: () => ac.abort(),
  };
}
