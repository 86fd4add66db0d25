// Bad-input sweep of the platform API: every /api route of control-plane/README.md and
// control-plane/instances/README.md, and /api/admin/*. Every bad input gets a 4xx `{detail}`
// (403 account_not_verified: `{detail: {code, message, redirect}}`), never a 5xx or a crash,
// and the API keeps serving.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { adminToken } from '../../control-plane/secrets.js';
import {
  assertRefused,
  BAD_BODIES,
  BAD_VALUES,
  exchange,
  Failures,
  invalidUtf8Json,
  request,
  requestBytes,
  seeded,
  startSweepPlatform,
  withField,
  type SweepPlatform,
} from './harness.js';

let p: SweepPlatform;
let admin: string;
/** A public template id (the seeded Gradio demo). */
let templateId: number;
/** A template of the sweep account. */
let ownTemplate: number;

before(async () => {
  // A generous launch rate: the sweep's launches must not turn into 429s it does not test.
  p = await startSweepPlatform({ RC_INSTANCE_LAUNCH_RATE: '60:1000' });
  admin = adminToken(p.dataDir);
  const list = await request(p.api, 'GET', '/api/templates');
  templateId = (JSON.parse(list.body) as { templates: { id: number; slug: string }[] }).templates.find((t) => t.slug === 'gradio-demo')!.id;
  const created = await request(p.api, 'POST', '/api/profile/templates', { headers: auth(), body: JSON.stringify(TEMPLATE) });
  assert.equal(created.status, 200, created.body);
  ownTemplate = (JSON.parse(created.body) as { id: number }).id;
});
after(async () => {
  await p?.close();
});

const json = { 'content-type': 'application/json' };
const auth = () => ({ ...json, authorization: `Bearer ${p.key}` });
const TEMPLATE = { title: 'Sweep', image: 'rc/gradio:latest', instance_type: 'gradio', app_port: 7860, start_command: 'true' };
const ANY_ANSWER = [200, 201, 400, 401, 403, 404, 405, 409, 413, 415, 429];

interface ApiRoute {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** `{T}`: a template of the caller's; `{P}`: a public template. */
  path: string;
  access: 'none' | 'key' | 'admin';
  good?: Record<string, unknown>;
  fields?: string[];
}

const ROUTES: ApiRoute[] = [
  { method: 'GET', path: '/api/health', access: 'none' },
  { method: 'POST', path: '/api/auth/signup', access: 'none', good: { email: 'new@example.com', password: 'long enough pw' }, fields: ['email', 'password'] },
  { method: 'POST', path: '/api/auth/login', access: 'none', good: { email: 'sweep@example.com', password: 'long enough pw' }, fields: ['email', 'password'] },
  { method: 'GET', path: '/api/auth/session', access: 'key' },
  { method: 'GET', path: '/api/me', access: 'key' },
  { method: 'POST', path: '/api/profile/ssh-key', access: 'key', good: { ssh_public_key: '' }, fields: ['ssh_public_key'] },
  { method: 'POST', path: '/api/credits/redeem', access: 'key', good: { coupon: 'NOPE-NOPE' }, fields: ['coupon'] },
  { method: 'GET', path: '/api/profile/model-usage', access: 'key' },
  { method: 'GET', path: '/api/profile/templates', access: 'key' },
  { method: 'GET', path: '/api/profile/templates/{T}', access: 'key' },
  {
    method: 'POST',
    path: '/api/profile/templates',
    access: 'key',
    good: TEMPLATE,
    fields: [
      'title',
      'image',
      'instance_type',
      'description',
      'slug',
      'category',
      'tags',
      'repo_url',
      'branch',
      'notebook_path',
      'start_command',
      'app_port',
      'ssh_enabled',
      'cover_url',
      'sort_order',
      'enabled',
      'persistent_storage',
      'disk_gb',
    ],
  },
  { method: 'DELETE', path: '/api/profile/templates/{T}', access: 'key' },
  { method: 'PUT', path: '/api/profile/templates/{T}', access: 'key', good: TEMPLATE, fields: ['title', 'image', 'tags', 'app_port', 'disk_gb', 'sort_order'] },
  { method: 'GET', path: '/api/templates', access: 'none' },
  { method: 'POST', path: '/api/templates/{P}/launch', access: 'key', good: { gpu_count: 3 }, fields: ['gpu_count', 'launch_verification_token'] },
  { method: 'POST', path: '/api/notebook/request', access: 'key', good: { template_id: 0 }, fields: ['template_id', 'gpu_count', 'launch_verification_token'] },
  { method: 'GET', path: '/api/notebook/status', access: 'key' },
  { method: 'DELETE', path: '/api/notebook/current', access: 'key' },
  { method: 'POST', path: '/api/profile/launch-verification', access: 'key', good: { enabled: false }, fields: ['enabled'] },
  { method: 'POST', path: '/api/profile/launch-verification-token', access: 'key', good: {}, fields: [] },
  {
    method: 'POST',
    path: '/api/admin/instances/launch-verification',
    access: 'admin',
    good: { email: 'nobody@example.com' },
    fields: ['email', 'enabled', 'issue_token'],
  },
  {
    method: 'POST',
    path: '/api/admin/account.create',
    access: 'admin',
    good: { email: 'made@example.com' },
    fields: ['email', 'credits', 'verified', 'editor', 'password'],
  },
  {
    method: 'POST',
    path: '/api/admin/account.grant-credits',
    access: 'admin',
    good: { email: 'sweep@example.com', credits: 1 },
    fields: ['email', 'credits', 'idempotency_key', 'reason'],
  },
  {
    method: 'POST',
    path: '/api/admin/account.set-limits',
    access: 'admin',
    good: { email: 'made@example.com' },
    fields: ['email', 'rpm', 'tpm', 'daily_tokens', 'clear'],
  },
  { method: 'POST', path: '/api/admin/coupon.create', access: 'admin', good: { credits: 1 }, fields: ['credits', 'email', 'code'] },
  { method: 'POST', path: '/api/admin/image.add', access: 'admin', good: { name: 'x', image: 'rc/gradio:latest' }, fields: ['name', 'image', 'ssh'] },
  { method: 'POST', path: '/api/admin/image.set-ssh', access: 'admin', good: { image: 'rc/gradio:latest', ssh: false }, fields: ['image', 'ssh'] },
  { method: 'POST', path: '/api/admin/image.disable', access: 'admin', good: { image: 'no/such:image' }, fields: ['image'] },
  {
    method: 'POST',
    path: '/api/admin/model.add',
    access: 'admin',
    good: { name: 'sweep-model', upstreams: ['http://127.0.0.1:9'], unchecked: true },
    fields: ['name', 'upstreams', 'servedName', 'tools', 'reasoning', 'efforts', 'maxContext', 'ownedBy', 'unchecked'],
  },
  { method: 'POST', path: '/api/admin/model.remove', access: 'admin', good: { name: 'no-such-model' }, fields: ['name'] },
  { method: 'POST', path: '/api/admin/account.list', access: 'admin', good: {}, fields: [] },
];

const pathOf = (r: ApiRoute) => r.path.replace('{T}', String(ownTemplate)).replace('{P}', String(templateId));
const headersOf = (r: ApiRoute): Record<string, string> =>
  r.access === 'admin' ? { ...json, 'x-rc-admin-token': admin } : r.access === 'key' ? auth() : { ...json };

async function assertServing(): Promise<void> {
  const r = await request(p.api, 'GET', '/api/me', { headers: auth() });
  assert.equal(r.status, 200, `follow-up request: ${r.status} ${r.body}`);
  const g = await request(p.gateway, 'GET', '/v1/models', { headers: auth() });
  assert.equal(g.status, 200, `follow-up gateway request: ${g.status} ${g.body}`);
}

test('whole bodies that are not a JSON object: 400 {detail}', async () => {
  const f = new Failures();
  for (const route of ROUTES.filter((r) => r.good)) {
    for (const [name, body] of BAD_BODIES) {
      const label = `${route.method} ${route.path} body ${name}`;
      // An empty launch body means "all defaults" (documented); anything else is a 400.
      const allowed = name === 'empty' && route.path.endsWith('/launch') ? ANY_ANSWER : [400];
      await f.check(label, async () =>
        assertRefused(label, await request(p.api, route.method, pathOf(route), { headers: headersOf(route), body }), { status: allowed, shapes: ['detail'] }),
      );
    }
  }
  f.assertNone();
  await assertServing();
});

test('every field with every wrong type, unknown fields, missing fields, invalid UTF-8', async () => {
  const f = new Failures();
  for (const route of ROUTES.filter((r) => r.good)) {
    for (const field of [...route.fields!, 'zz_unknown_field']) {
      for (const [name, value] of BAD_VALUES) {
        const label = `${route.method} ${route.path} ${field}=${name}`;
        await f.check(label, async () => {
          const r = await request(p.api, route.method, pathOf(route), { headers: headersOf(route), body: withField(route.good!, field, value) });
          // Unknown fields are refused (400), or the body is over the limit first (413).
          assertRefused(label, r, { status: field === 'zz_unknown_field' ? [400, 413] : ANY_ANSWER, shapes: ['detail'] });
        });
      }
      if (field in route.good!) {
        const label = `${route.method} ${route.path} without ${field}`;
        await f.check(label, async () =>
          assertRefused(
            label,
            await request(p.api, route.method, pathOf(route), { headers: headersOf(route), body: withField(route.good!, field, undefined) }),
            { status: ANY_ANSWER, shapes: ['detail'] },
          ),
        );
      }
      const label = `${route.method} ${route.path} ${field} with invalid UTF-8`;
      await f.check(label, async () =>
        assertRefused(label, await request(p.api, route.method, pathOf(route), { headers: headersOf(route), body: invalidUtf8Json(route.good!, field) }), {
          status: ANY_ANSWER,
          shapes: ['detail'],
        }),
      );
    }
  }
  f.assertNone();
  await assertServing();
});

test('generated bodies (seeded): random mutations of good bodies', async () => {
  const f = new Failures();
  const rand = seeded(7);
  const withBodies = ROUTES.filter((r) => r.good && r.fields!.length);
  const pick = <T>(a: readonly T[]): T => a[Math.floor(rand() * a.length)]!;
  for (let i = 0; i < 100; i++) {
    const route = pick(withBodies);
    let body = JSON.stringify(route.good);
    const op = Math.floor(rand() * 3);
    if (op === 0) body = body.slice(0, Math.floor(rand() * body.length));
    else if (op === 1) {
      const at = Math.floor(rand() * body.length);
      body = body.slice(0, at) + pick(['"', '{', ']', ',', '\\', '\u0000', 'ß']) + body.slice(at);
    } else body = withField(route.good!, pick(route.fields!), pick(BAD_VALUES)[1]);
    const label = `generated #${i} ${route.path} ${body.slice(0, 80)}`;
    await f.check(label, async () =>
      assertRefused(label, await request(p.api, route.method, pathOf(route), { headers: headersOf(route), body }), { status: ANY_ANSWER, shapes: ['detail'] }),
    );
  }
  f.assertNone();
  await assertServing();
});

test('credentials: missing, other schemes, malformed, unknown, sessions without CSRF, bad admin tokens', async () => {
  const f = new Failures();
  const cases: [string, Record<string, string>, number[]][] = [
    ['no credential', {}, [401]],
    ['Basic scheme', { authorization: 'Basic dXNlcjpwYXNz' }, [401]],
    ['Bearer alone', { authorization: 'Bearer' }, [401]],
    ['short rc- key', { authorization: 'Bearer rc-short' }, [401]],
    ['unknown well-formed key', { authorization: `Bearer rc-${'A'.repeat(43)}` }, [401]],
    ['key with trailing junk', { authorization: `Bearer rc-${'B'.repeat(43)} junk` }, [401]],
    ['very long value', { authorization: `Bearer ${'x'.repeat(3000)}` }, [401]],
    ['garbage session cookie', { cookie: 'rc_session=nope' }, [401]],
    ['odd cookie header', { cookie: ';;=;rc_session;=x' }, [401]],
    ['very long cookie', { cookie: `rc_session=${'c'.repeat(3000)}` }, [401]],
  ];
  for (const route of ROUTES.filter((r) => r.access === 'key')) {
    for (const [name, headers, status] of cases) {
      const label = `${route.method} ${route.path} ${name}`;
      await f.check(label, async () =>
        assertRefused(
          label,
          await request(p.api, route.method, pathOf(route), { headers: { ...json, ...headers }, body: route.good ? JSON.stringify(route.good) : undefined }),
          { status, shapes: ['detail'] },
        ),
      );
    }
    if (route.method !== 'GET') {
      for (const [name, csrf] of [
        ['session without CSRF', undefined],
        ['session with a wrong CSRF', 'wrong'],
        ['session with a long CSRF', 'x'.repeat(3000)],
      ] as const) {
        const label = `${route.method} ${route.path} ${name}`;
        const headers: Record<string, string> = { ...json, cookie: p.unverified.cookie };
        if (csrf) headers['x-csrf-token'] = csrf;
        await f.check(label, async () =>
          assertRefused(label, await request(p.api, route.method, pathOf(route), { headers, body: route.good ? JSON.stringify(route.good) : undefined }), {
            status: [403],
            shapes: ['detail'],
          }),
        );
      }
    }
  }
  for (const route of ROUTES.filter((r) => r.access === 'admin')) {
    for (const [name, token] of [
      ['no admin token', undefined],
      ['wrong admin token', 'nope'],
      ['long admin token', 'a'.repeat(3000)],
      ['API key as admin token', p.key],
    ] as const) {
      const label = `${route.path} ${name}`;
      const headers: Record<string, string> = { ...json, authorization: `Bearer ${p.key}` };
      if (token) headers['x-rc-admin-token'] = token;
      await f.check(label, async () =>
        assertRefused(label, await request(p.api, 'POST', pathOf(route), { headers, body: JSON.stringify(route.good) }), { status: [401], shapes: ['detail'] }),
      );
    }
  }
  // The unverified account's launch: 403 with the account_not_verified detail object.
  const launch = await request(p.api, 'POST', `/api/templates/${templateId}/launch`, {
    headers: { ...json, cookie: p.unverified.cookie, 'x-csrf-token': p.unverified.csrf },
    body: '{}',
  });
  assertRefused('unverified launch', launch, { status: [403], shapes: ['detail'] });
  assert.equal((JSON.parse(launch.body) as { detail: { code: string } }).detail.code, 'account_not_verified');
  f.assertNone();
  await assertServing();
});

test('methods, content types and odd headers', async () => {
  const f = new Failures();
  for (const route of ROUTES) {
    for (const m of ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD']) {
      if (ROUTES.some((r) => r.path === route.path && r.method === m)) continue;
      const label = `${m} ${route.path}`;
      await f.check(label, async () => {
        const r = await exchange(p.api, [requestBytes(m, pathOf(route), { headers: headersOf(route), body: m === 'HEAD' ? undefined : '{}' })], {
          timeoutMs: m === 'HEAD' ? 1000 : 10_000,
        });
        if (m === 'HEAD') return assert.ok(!r || r.status < 500, `${label}: ${r?.status}`);
        assertRefused(label, r, { status: [404, 405], shapes: ['detail'] });
        if (r!.status === 405) assert.ok(r!.headers.allow, `${label}: 405 without Allow`);
      });
    }
  }
  for (const route of ROUTES.filter((r) => r.good && r.method !== 'GET')) {
    for (const ct of ['text/plain', 'application/x-www-form-urlencoded', '', 'application/json; charset=utf-16', 'x'.repeat(3000)]) {
      const label = `${route.path} content-type ${ct.slice(0, 30)}`;
      const headers = { ...headersOf(route), 'content-type': ct };
      await f.check(label, async () =>
        assertRefused(label, await request(p.api, route.method, pathOf(route), { headers, body: JSON.stringify(route.good) }), {
          status: ANY_ANSWER,
          shapes: ['detail'],
        }),
      );
    }
    for (const [name, headers] of [
      ['odd x-request-id', { 'x-request-id': 'a b\tc;d' }],
      ['long x-request-id', { 'x-request-id': 'r'.repeat(3000) }],
      ['odd x-forwarded-proto', { 'x-forwarded-proto': 'HTTPS, http, gopher' }],
    ] as [string, Record<string, string>][]) {
      const label = `${route.path} ${name}`;
      await f.check(label, async () => {
        const r = await request(p.api, route.method, pathOf(route), { headers: { ...headersOf(route), ...headers }, body: JSON.stringify(route.good) });
        assertRefused(label, r, { status: ANY_ANSWER, shapes: ['detail'] });
        if (headers['x-request-id']) assert.notEqual(r.headers['x-request-id'], headers['x-request-id'], `${label}: echoed an odd request id`);
      });
    }
  }
  f.assertNone();
  await assertServing();
});

test('body framing: oversized (with and without Content-Length), lying Content-Length, chunked', async () => {
  const f = new Failures();
  const limit = p.platform.config.apiMaxBodyBytes;
  for (const route of ROUTES.filter((r) => r.good && r.method !== 'GET')) {
    const path = pathOf(route);
    const headers = headersOf(route);
    const big = JSON.stringify({ ...route.good, pad: 'x'.repeat(limit) });
    const good = JSON.stringify(route.good);
    const cases: [string, () => Promise<import('./harness.js').RawReply | undefined>, number[]][] = [
      ['oversized with length', () => request(p.api, route.method, path, { headers, body: big }), [413]],
      ['oversized chunked', () => request(p.api, route.method, path, { headers, body: big, chunked: true }), [413]],
      ['declared oversized, nothing sent', () => exchange(p.api, [requestBytes(route.method, path, { headers, contentLength: limit + 1 })]), [413]],
      ['chunked good body', () => request(p.api, route.method, path, { headers, body: good, chunked: true }), ANY_ANSWER],
      [
        'length shorter than the body',
        () => exchange(p.api, [requestBytes(route.method, path, { headers, body: good, contentLength: good.length - 1 })]),
        [400],
      ],
      [
        'length 0 with a body',
        () => exchange(p.api, [requestBytes(route.method, path, { headers, body: good, contentLength: 0 })]),
        route.path.endsWith('/launch') ? ANY_ANSWER : [400],
      ],
    ];
    for (const [name, send, status] of cases) {
      const label = `${route.method} ${route.path} ${name}`;
      await f.check(label, async () => assertRefused(label, await send(), { status, shapes: ['detail'] }));
    }
    const label = `${route.method} ${route.path} length longer than the body`;
    await f.check(label, async () => {
      const r = await exchange(p.api, [requestBytes(route.method, path, { headers, body: good, contentLength: good.length + 40 })], {
        end: true,
        timeoutMs: 2000,
      });
      if (r) assertRefused(label, r, { status: [400], shapes: ['detail'] });
    });
    // The client goes away mid head, after the head, mid body.
    const all = requestBytes(route.method, path, { headers, body: good });
    const headEnd = all.indexOf('\r\n\r\n') + 4;
    for (const part of [all.subarray(0, 12), all.subarray(0, headEnd), all.subarray(0, headEnd + 1)]) {
      await f.check(`${label} cut`, async () => assert.equal(await exchange(p.api, [part], { timeoutMs: 100 }), undefined));
    }
  }
  f.assertNone();
  await assertServing();
});

test('path tricks: dot segments, encoded and malformed escapes, NUL, huge ids, trailing slashes', async () => {
  const f = new Failures();
  const paths: [string, string][] = [
    ['GET', '/api/../api/me'],
    ['GET', '/api/./me'],
    ['GET', '/api//me'],
    ['GET', '/api/me/'],
    ['GET', '/API/ME'],
    ['GET', '/api/me%00'],
    ['GET', '/api%2Fme'],
    ['GET', '/api/profile/templates/%ZZ'],
    ['GET', '/api/profile/templates/%E0%A4%A'],
    ['GET', '/api/profile/templates/%'],
    ['GET', '/api/profile/templates/%00'],
    ['GET', '/api/profile/templates/1%2F2'],
    ['GET', '/api/profile/templates/-1'],
    ['GET', '/api/profile/templates/1.5'],
    ['GET', '/api/profile/templates/0x10'],
    ['GET', '/api/profile/templates/' + '9'.repeat(40)],
    ['GET', '/api/profile/templates/9007199254740993'],
    ['GET', '/api/profile/templates/%F0%9F%98%80'],
    ['GET', '/api/profile/templates/' + 'x'.repeat(3000)],
    ['GET', '/api/profile/templates/1/'],
    ['PUT', '/api/profile/templates/%ZZ'],
    ['DELETE', '/api/profile/templates/%ZZ'],
    ['DELETE', '/api/profile/templates/999999'],
    ['POST', '/api/templates/%ZZ/launch'],
    ['POST', '/api/templates/%ff/launch'],
    ['POST', '/api/templates/0/launch'],
    ['POST', '/api/templates//launch'],
    ['POST', '/api/admin/%ZZ'],
    ['POST', '/api/admin/%ff'],
    ['POST', '/api/admin/__proto__'],
    ['POST', '/api/admin/constructor'],
    ['POST', '/api/admin/'],
    ['POST', '/api/admin/account.create/x'],
    ['GET', '/api'],
    ['GET', '/api/'],
    ['GET', '/'],
    ['GET', '/v1/models'],
    ['GET', '/api/me?%ff=%zz'],
    ['GET', '/' + 'a'.repeat(3000)],
    ['GET', '/api/%2e%2e/%2e%2e/etc/passwd'],
  ];
  for (const [m, path] of paths) {
    const label = `${m} ${path.slice(0, 60)}`;
    const headers = path.startsWith('/api/admin') ? { ...json, 'x-rc-admin-token': admin } : auth();
    await f.check(label, async () =>
      assertRefused(label, await request(p.api, m, path, { headers, body: m === 'GET' ? undefined : '{}' }), {
        status: [200, 400, 404, 405],
        shapes: ['detail'],
      }),
    );
  }
  f.assertNone();
  await assertServing();
});

test('credential-changing routes with bad input: api-token and logout', async () => {
  const f = new Failures();
  const other = await p.account('rotate@example.com', { verified: true, password: 'long enough pw' });
  let key = other.api_token!;
  for (const [name, body] of [...BAD_BODIES, ['good', '{}'] as [string, string]]) {
    const label = `POST /api/profile/api-token body ${name}`;
    await f.check(label, async () => {
      const r = await request(p.api, 'POST', '/api/profile/api-token', { headers: { ...json, authorization: `Bearer ${key}` }, body });
      assertRefused(label, r, { status: [200, 400], shapes: ['detail'] });
      if (r.status === 200) key = (JSON.parse(r.body) as { api_token: string }).api_token;
    });
  }
  for (const [name, body] of BAD_BODIES) {
    const s = await p.login('rotate@example.com', 'long enough pw');
    const label = `POST /api/auth/logout body ${name}`;
    await f.check(label, async () =>
      assertRefused(label, await request(p.api, 'POST', '/api/auth/logout', { headers: { ...json, cookie: s.cookie, 'x-csrf-token': s.csrf }, body }), {
        status: [200, 400],
        shapes: ['detail'],
      }),
    );
  }
  f.assertNone();
  await assertServing();
});
