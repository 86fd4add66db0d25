// A soak's traffic: every kind of request a platform serves, from a few closed-loop workers, each
// with an account of its own: the model routes (chat, streams, messages, count_tokens, responses,
// the model list), the platform API (profile, templates, sign-in and out, key rotation, coupons,
// usage), and one launcher cycling instances through ready to destroy (a dedicated endpoint
// called, an app exposed through rc-tunnel and fetched on its public URL). Traffic pauses on
// request, so the memory sampler can read a quiet process.
import { request as httpRequest } from 'node:http';
import { callAdmin } from '../../control-plane/admin-client.js';

export interface Account {
  email: string;
  password: string;
  key: string;
}

/** Counts per request kind: done, refused (4xx), failed (5xx or no answer), and a few messages. */
export interface KindStats {
  ok: number;
  refused: number;
  failed: number;
  examples: string[];
}

const MODEL = 'sim-chat';
const HELLO = [{ role: 'user', content: 'Say hello to the soak' }];

/**
 * A prompt of its own for each request (about 60 tokens), so the embedded sims' prefix caches fill
 * up over a soak as they would under real traffic, instead of holding one prompt.
 */
let prompts = 0;
function uniquePrompt(): { role: string; content: string }[] {
  const n = prompts++;
  return [{ role: 'user', content: `Soak request ${n}: summarize the numbers ${Array.from({ length: 24 }, (_, i) => (n * 31 + i * 7) % 997).join(' ')}` }];
}

export class Traffic {
  readonly stats = new Map<string, KindStats>();
  private stopped = false;
  private pause: { done: Promise<void>; resume: () => void } | undefined;
  private inFlight = 0;
  private idle: (() => void) | undefined;

  constructor(
    private readonly api: string,
    private readonly gateway: string,
    private readonly tunnelsPort: number,
    private readonly dataDir: string,
    /** A worker's pause between two operations (0: back to back). */
    private readonly pauseMs = 0,
  ) {}

  /** Holds new requests and resolves once none is in flight. */
  async quiesce(): Promise<void> {
    if (!this.pause) {
      let resume!: () => void;
      const done = new Promise<void>((r) => (resume = r));
      this.pause = { done, resume };
    }
    while (this.inFlight > 0) await new Promise<void>((r) => (this.idle = r));
  }

  resume(): void {
    const p = this.pause;
    this.pause = undefined;
    p?.resume();
  }

  stop(): void {
    this.stopped = true;
    this.resume();
  }

  /** Creates a verified account with credits, through the running platform's admin API. */
  async account(email: string): Promise<Account> {
    const password = 'soak-password-1';
    const a = (await this.admin('account.create', { email, password, verified: true, credits: 1_000_000 })) as { api_token: string };
    await this.until(async () => (await this.fetch('GET', `${this.gateway}/v1/models`, a.api_token)).status === 200);
    return { email, password, key: a.api_token };
  }

  /**
   * Fills the embedded `sim-chat`'s prefix cache (`blocks` blocks of 16 tokens, the sim's
   * capacity) with long prompts of their own, and returns how many blocks were sent. The cache is
   * bounded, but the soak's short prompts take it 10-20 minutes to fill (about 5 MB of block
   * hashes): a warm-up that ends before it is full counts the filling as growth.
   */
  async fillPrefixCache(a: Account, blocks: number): Promise<number> {
    let sent = 0;
    for (let r = 0; sent < blocks; r++) {
      // About 16,000 tokens (the sim's words are tokens), every block after the first unique.
      const words = Array.from({ length: 16_000 }, (_, i) => (r * 7919 + i * 104_729) % 1_000_003).join(' ');
      const messages = [{ role: 'user', content: `Soak fill ${r}: ${words}` }];
      const res = await this.fetch('POST', `${this.gateway}/v1/chat/completions`, a.key, { model: MODEL, messages, max_tokens: 1 });
      if (res.status !== 200) throw new Error(`filling the prefix cache: ${res.status} ${res.text.slice(0, 300)}`);
      sent += Math.floor((res.json as { usage: { prompt_tokens: number } }).usage.prompt_tokens / 16);
    }
    return sent;
  }

  /** Runs `kinds` in turn on `account` until stopped. */
  async worker(account: Account, kinds: readonly string[]): Promise<void> {
    for (let i = 0; !this.stopped; i++) {
      const kind = kinds[i % kinds.length]!;
      await this.op(kind, () => this.run(kind, account));
      if (this.pauseMs > 0) await new Promise((r) => setTimeout(r, this.pauseMs));
    }
  }

  /** One instance at a time on `account`: the demo endpoint, then an app behind rc-tunnel. */
  async launcher(account: Account): Promise<void> {
    const created = await this.fetch('POST', `${this.api}/api/profile/templates`, account.key, {
      title: 'Soak tunnel app',
      image: 'rc/gradio:latest',
      instance_type: 'gradio',
      app_port: 7860,
      start_command:
        `rc tunnel expose --port $PORT --detach && exec ${JSON.stringify(process.execPath)} -e ` +
        `"require('http').createServer((q,s)=>s.end('soak '+q.url)).listen(+process.env.PORT,'127.0.0.1')"`,
    });
    const appTemplate = (created.json as { id: number }).id;
    const demo = ((await this.fetch('GET', `${this.api}/api/templates`)).json as { templates: { id: number; slug: string }[] }).templates.find(
      (t) => t.slug === 'vllm-demo',
    )!.id;
    while (!this.stopped) {
      await this.op('launch:dedicated', () =>
        this.withInstance(account, demo, async (ready) => {
          const url = `${ready.dedicated_base_url}/chat/completions`;
          return (await this.fetch('POST', url, account.key, { model: 'demo', messages: HELLO, max_tokens: 4 })).status;
        }),
      );
      if (this.stopped) break;
      await this.op('launch:tunnel', () =>
        this.withInstance(account, appTemplate, async () => {
          const publicUrl = await this.until(async () => {
            const logs = await this.fetch('GET', `${this.api}/api/notebook/logs?tail=50`, account.key);
            return /Forwarding (http:\/\/\S+)/.exec(logs.text)?.[1];
          });
          return this.viaTunnel(publicUrl);
        }),
      );
    }
  }

  private async run(kind: string, a: Account): Promise<number> {
    const g = this.gateway;
    switch (kind) {
      case 'chat':
        return (await this.fetch('POST', `${g}/v1/chat/completions`, a.key, { model: MODEL, messages: uniquePrompt(), max_tokens: 16 })).status;
      case 'chat-stream':
        return (
          await this.fetch('POST', `${g}/v1/chat/completions`, a.key, {
            model: MODEL,
            messages: uniquePrompt(),
            max_tokens: 16,
            stream: true,
            stream_options: { include_usage: true },
          })
        ).status;
      case 'messages':
        return (await this.fetch('POST', `${g}/v1/messages`, a.key, { model: MODEL, messages: uniquePrompt(), max_tokens: 16 })).status;
      case 'messages-stream':
        return (await this.fetch('POST', `${g}/v1/messages`, a.key, { model: MODEL, messages: uniquePrompt(), max_tokens: 16, stream: true })).status;
      case 'count-tokens':
        return (await this.fetch('POST', `${g}/v1/messages/count_tokens`, a.key, { model: MODEL, messages: uniquePrompt() })).status;
      case 'responses':
        return (await this.fetch('POST', `${g}/v1/responses`, a.key, { model: MODEL, input: 'Say hello', max_output_tokens: 16 })).status;
      case 'models':
        return (await this.fetch('GET', `${g}/v1/models`, a.key)).status;
      case 'me':
        return (await this.fetch('GET', `${this.api}/api/me`, a.key)).status;
      case 'templates':
        return (await this.fetch('GET', `${this.api}/api/profile/templates`, a.key)).status;
      case 'usage':
        return (await this.fetch('GET', `${this.api}/api/profile/model-usage`, a.key)).status;
      case 'sign-in': {
        const login = await this.fetch('POST', `${this.api}/api/auth/login`, undefined, { email: a.email, password: a.password });
        if (login.status !== 200) return login.status;
        // The new session's cookie comes first; the others expire stale ones (two would be no session).
        const cookie = login.setCookie[0]!.split(';')[0]!;
        const csrf = (login.json as { csrf_token: string }).csrf_token;
        const me = await this.fetch('GET', `${this.api}/api/me`, undefined, undefined, { cookie });
        if (me.status !== 200) return me.status;
        return (await this.fetch('POST', `${this.api}/api/auth/logout`, undefined, {}, { cookie, 'x-csrf-token': csrf })).status;
      }
      case 'rotate-key': {
        const r = await this.fetch('POST', `${this.api}/api/profile/api-token`, a.key, {});
        if (r.status !== 200) return r.status;
        a.key = (r.json as { api_token: string }).api_token;
        // The gateway learns the new key from an event: wait for it before the worker goes on.
        await this.until(async () => (await this.fetch('GET', `${g}/v1/models`, a.key)).status === 200);
        return 200;
      }
      case 'coupon': {
        const c = (await this.admin('coupon.create', { credits: 1 })) as { code: string };
        return (await this.fetch('POST', `${this.api}/api/credits/redeem`, a.key, { coupon: c.code })).status;
      }
      default:
        throw new Error(`unknown kind ${kind}`);
    }
  }

  /** Launches `templateId`, waits for ready, runs `use`, and destroys the instance however `use` ended. */
  private async withInstance(a: Account, templateId: number, use: (ready: { dedicated_base_url?: string }) => Promise<number>): Promise<number> {
    try {
      return await use(await this.launch(a, templateId));
    } finally {
      await this.destroy(a);
    }
  }

  private async launch(a: Account, templateId: number): Promise<{ dedicated_base_url?: string }> {
    const r = await this.fetch('POST', `${this.api}/api/templates/${templateId}/launch`, a.key, { gpu_count: 1 });
    if (r.status !== 200) throw new Error(`launch answered ${r.status}: ${r.text}`);
    return this.until(async () => {
      const st = (await this.fetch('GET', `${this.api}/api/notebook/status`, a.key)).json as { status: string; dedicated_base_url?: string };
      if (st.status === 'failed') throw new Error(`launch failed: ${JSON.stringify(st)}`);
      return st.status === 'ready' ? st : undefined;
    });
  }

  private async destroy(a: Account): Promise<void> {
    await this.fetch('DELETE', `${this.api}/api/notebook/current`, a.key);
    await this.until(async () => {
      const st = (await this.fetch('GET', `${this.api}/api/notebook/status`, a.key)).json as { status: string };
      return st.status === 'stopped' || st.status === 'none' ? true : undefined;
    });
  }

  /** GET / of a tunnel's public URL, sent to the tunnels' listener on loopback with the URL's host. */
  private viaTunnel(publicUrl: string): Promise<number> {
    const host = new URL(publicUrl).host;
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: this.tunnelsPort, path: '/', headers: { host } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end();
    });
  }

  /** Counts one operation under `kind` (waiting first while traffic is paused). */
  private async op(kind: string, fn: () => Promise<number>): Promise<void> {
    while (this.pause) await this.pause.done;
    if (this.stopped) return;
    const s = this.stats.get(kind) ?? { ok: 0, refused: 0, failed: 0, examples: [] };
    this.stats.set(kind, s);
    this.inFlight++;
    try {
      const status = await fn();
      if (status < 400) s.ok++;
      else if (status < 500) s.refused++;
      else s.failed++;
      if (status >= 400 && s.examples.length < 3) s.examples.push(`status ${status}`);
    } catch (err) {
      s.failed++;
      if (s.examples.length < 3) s.examples.push((err as Error).message.slice(0, 300));
    } finally {
      this.inFlight--;
      if (this.inFlight === 0) this.idle?.();
    }
  }

  private admin(op: string, input: Record<string, unknown>): Promise<unknown> {
    return callAdmin({ dataDir: this.dataDir, redisPrefix: process.env.RC_GATE_KEY_PREFIX ?? 'rc:', configuredModels: [] }, op as never, input);
  }

  private async until<T>(probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = await probe();
      if (v !== undefined && v !== false) return v;
      if (Date.now() > deadline) throw new Error('timed out waiting');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  private async fetch(
    method: string,
    url: string,
    key?: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; text: string; json: unknown; setCookie: string[] }> {
    const h: Record<string, string> = { ...headers };
    if (key) h.authorization = `Bearer ${key}`;
    if (body !== undefined) h['content-type'] = 'application/json';
    const r = await fetch(url, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(60_000) });
    const text = await r.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: r.status, text, json, setCookie: r.headers.getSetCookie() };
  }
}
