// The platform API workloads the store benchmark runs, each an operation a closed-loop worker
// repeats with an account of its own: the profile read, a status poll of a live instance, a sign-in
// (sign in, read the profile with the session, sign out) and a launch-to-ready-then-destroy cycle.
import { callAdmin } from '../../control-plane/admin-client.js';

export interface BenchAccount {
  email: string;
  password: string;
  key: string;
  /** A template of its own that starts a small HTTP server on $PORT (ready as soon as it listens). */
  templateId: number;
}

interface Answer {
  status: number;
  json: unknown;
  setCookie: string[];
}

const PASSWORD = 'bench-password-1';
const POLL_MS = 20;

/** One HTTP call (keep-alive through fetch's pool); throws on a 5xx or a refusal the workload did not expect. */
async function call(method: string, url: string, auth: { key?: string; cookie?: string; csrf?: string }, body?: unknown): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (auth.key) headers.authorization = `Bearer ${auth.key}`;
  if (auth.cookie) headers.cookie = auth.cookie;
  if (auth.csrf) headers['x-csrf-token'] = auth.csrf;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(60_000) });
  const text = await r.text();
  if (r.status >= 400) throw new Error(`${method} ${new URL(url).pathname} answered ${r.status}: ${text.slice(0, 200)}`);
  return { status: r.status, json: text ? JSON.parse(text) : undefined, setCookie: r.headers.getSetCookie() };
}

/** A verified account with credits and its template, made through the running platform's admin API. */
export async function benchAccount(api: string, dataDir: string, email: string): Promise<BenchAccount> {
  const made = (await callAdmin({ dataDir, redisPrefix: 'rc:', configuredModels: [] }, 'account.create', {
    email,
    password: PASSWORD,
    verified: true,
    credits: 1_000_000,
  })) as { api_token: string };
  const key = made.api_token;
  const server = `require('http').createServer((q,s)=>s.end('ok')).listen(+process.env.PORT,'127.0.0.1')`;
  const template = await call(
    'POST',
    `${api}/api/profile/templates`,
    { key },
    {
      title: 'Bench app',
      image: 'rc/gradio:latest',
      instance_type: 'gradio',
      app_port: 7860,
      start_command: `exec ${JSON.stringify(process.execPath)} -e ${JSON.stringify(server)}`,
    },
  );
  return { email, password: PASSWORD, key, templateId: (template.json as { id: number }).id };
}

async function statusOf(api: string, a: BenchAccount): Promise<string> {
  return ((await call('GET', `${api}/api/notebook/status`, { key: a.key })).json as { status: string }).status;
}

/** Launches the account's template and polls its status until ready. */
export async function launchReady(api: string, a: BenchAccount): Promise<void> {
  await call('POST', `${api}/api/templates/${a.templateId}/launch`, { key: a.key }, { gpu_count: 1 });
  for (;;) {
    const s = await statusOf(api, a);
    if (s === 'ready') return;
    if (s === 'failed' || s === 'stopped') throw new Error(`launch ended ${s}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** Destroys the account's instance and polls until it is gone. */
export async function destroyGone(api: string, a: BenchAccount): Promise<void> {
  await call('DELETE', `${api}/api/notebook/current`, { key: a.key });
  for (;;) {
    const s = await statusOf(api, a);
    if (s === 'stopped' || s === 'none') return;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

export type Workload = 'me' | 'status' | 'sign-in' | 'launch-destroy';

/** One operation of `workload` for account `a`. */
export async function operation(workload: Workload, api: string, a: BenchAccount): Promise<void> {
  switch (workload) {
    case 'me':
      await call('GET', `${api}/api/me`, { key: a.key });
      return;
    case 'status':
      if ((await statusOf(api, a)) !== 'ready') throw new Error('the instance is not ready');
      return;
    case 'sign-in': {
      const login = await call('POST', `${api}/api/auth/login`, {}, { email: a.email, password: a.password });
      const cookie = login.setCookie[0]!.split(';')[0]!;
      const csrf = (login.json as { csrf_token: string }).csrf_token;
      await call('GET', `${api}/api/me`, { cookie });
      await call('POST', `${api}/api/auth/logout`, { cookie, csrf }, {});
      return;
    }
    case 'launch-destroy':
      await launchReady(api, a);
      await destroyGone(api, a);
      return;
  }
}
