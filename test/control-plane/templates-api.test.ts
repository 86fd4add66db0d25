// SPEC "Templates": every field rule, the owner's CRUD, the public list, editor-only publishing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ROUTED_PORTS } from '../../control-plane/templates.js';
import { startPlatform, type Platform } from './platform.js';

let p: Platform;
let key: string;
let editorKey: string;
const IMAGE = 'rc/gradio:latest';
before(async () => {
  p = await startPlatform();
  key = (await p.account('owner@x.io', { verified: true })).api_token!;
  editorKey = (await p.account('editor@x.io', { verified: true, editor: true })).api_token!;
});
after(async () => {
  await p.close();
});

const base = { title: 'T', image: IMAGE };

// [name, body, expected status, detail pattern]
const CASES: [string, Record<string, unknown>, number, RegExp?][] = [
  ['minimal', base, 200],
  ...ROUTED_PORTS.map((port): [string, Record<string, unknown>, number] => [`routed port ${port}`, { ...base, app_port: port }, 200]),
  ...[22, 80, 8080, 8888, 0, -1, 65536].map((port): [string, Record<string, unknown>, number, RegExp] => [
    `unrouted port ${port}`,
    { ...base, app_port: port },
    400,
    /app_port must be a routed port/,
  ]),
  ['port as string', { ...base, app_port: '7860' }, 400, /app_port/],
  ['port not integer', { ...base, app_port: 7860.5 }, 400, /app_port/],
  ...['jupyter', 'gradio', 'streamlit', 'comfyui', 'custom'].map((t): [string, Record<string, unknown>, number] => [
    `type ${t}`,
    { ...base, instance_type: t },
    200,
  ]),
  ['unknown instance_type', { ...base, instance_type: 'tensorflow' }, 400, /instance_type/],
  ['vllm without start_command', { ...base, instance_type: 'vllm' }, 400, /start_command is required when instance_type is vllm/],
  ['sglang with blank start_command', { ...base, instance_type: 'sglang', start_command: '  ' }, 400, /start_command is required/],
  ['vllm with start_command', { ...base, instance_type: 'vllm', start_command: 'vllm serve m --host 0.0.0.0 --port 8000', app_port: 8000 }, 200],
  ['image not in catalog', { ...base, image: 'evil/miner:latest' }, 400, /^Invalid image selected$/],
  ['missing title', { image: IMAGE }, 400, /title is required/],
  ['empty title', { ...base, title: '  ' }, 400, /title/],
  ['missing image', { title: 'T' }, 400, /image is required/],
  ['unknown field', { ...base, gpu: 8 }, 400, /Unknown field: gpu/],
  ['tags not array', { ...base, tags: 'a,b' }, 400, /tags/],
  ['tags of strings', { ...base, tags: ['a', 'b'] }, 200],
  ['ssh_enabled string', { ...base, ssh_enabled: 'true' }, 400, /ssh_enabled/],
  ['sort_order float', { ...base, sort_order: 1.5 }, 400, /sort_order/],
  ['bad slug', { ...base, slug: 'Has Spaces' }, 400, /slug/],
  ['disk 99', { ...base, disk_gb: 99 }, 400, /disk_gb/],
  ['disk 201', { ...base, disk_gb: 201 }, 400, /disk_gb/],
  ['disk 150 persistent', { ...base, disk_gb: 150, persistent_storage: true }, 200],
  ['persistent not boolean', { ...base, persistent_storage: 1 }, 400, /persistent_storage/],
  [
    'every field',
    {
      title: 'Full',
      image: IMAGE,
      instance_type: 'gradio',
      description: 'd',
      slug: 'full-one',
      category: 'apps',
      tags: ['x'],
      repo_url: 'https://example.com/r.git',
      branch: 'dev',
      notebook_path: 'a.ipynb',
      start_command: 'python app.py',
      app_port: 7860,
      ssh_enabled: true,
      cover_url: 'https://example.com/c.png',
      sort_order: 3,
      enabled: false,
      persistent_storage: true,
      disk_gb: 200,
    },
    200,
  ],
];

for (const [name, body, status, detail] of CASES) {
  test(`POST /api/profile/templates: ${name} -> ${status}`, async () => {
    const r = await p.call('POST', '/api/profile/templates', { key, body });
    assert.equal(r.status, status, JSON.stringify(r.body));
    if (detail) assert.match(r.body.detail, detail);
    // PUT takes the same body and the same rules.
    if (status === 200) {
      const put = await p.call('PUT', `/api/profile/templates/${r.body.id}`, { key, body });
      assert.equal(put.status, 200);
    }
  });
}

test('create returns the full template with defaults; PUT replaces; DELETE removes; list carries SPEC fields and images', async () => {
  const c = await p.call('POST', '/api/profile/templates', { key, body: { title: 'Mine', image: IMAGE, sort_order: 5 } });
  assert.equal(c.status, 200);
  const t = c.body;
  assert.equal(typeof t.id, 'number');
  assert.equal(t.instance_type, 'jupyter');
  assert.equal(t.branch, 'main');
  assert.equal(t.ssh_enabled, false);
  assert.equal(t.enabled, false);
  assert.equal(t.persistent_storage, false);
  assert.equal(t.disk_gb, 100);
  assert.deepEqual(t.tags, []);

  const put = await p.call('PUT', `/api/profile/templates/${t.id}`, {
    key,
    body: { title: 'Renamed', image: 'rc/streamlit:latest', app_port: 8501, ssh_enabled: true },
  });
  assert.equal(put.status, 200);
  assert.equal(put.body.title, 'Renamed');
  assert.equal(put.body.sort_order, 0, 'PUT replaces: omitted fields take their defaults');
  assert.equal(put.body.ssh_enabled, true);

  const list = await p.call('GET', '/api/profile/templates', { key });
  assert.equal(list.status, 200);
  const item = list.body.templates.find((x: { id: number }) => x.id === t.id);
  assert.deepEqual(item, {
    id: t.id,
    title: 'Renamed',
    slug: null,
    image: 'rc/streamlit:latest',
    instance_type: 'jupyter',
    ssh_enabled: true,
    enabled: false,
    sort_order: 0,
    image_ssh: false, // whether the image serves SSH (issue 42): the seeded ones do not
  });
  assert.ok(list.body.images.length >= 4);
  for (const img of list.body.images) assert.deepEqual(Object.keys(img).sort(), ['enabled', 'image', 'name', 'ssh']);

  const del = await p.call('DELETE', `/api/profile/templates/${t.id}`, { key });
  assert.deepEqual([del.status, del.body], [200, { success: true }]);
  assert.equal((await p.call('DELETE', `/api/profile/templates/${t.id}`, { key })).status, 404);
  assert.equal((await p.call('PUT', `/api/profile/templates/${t.id}`, { key, body: base })).status, 404);
  for (const id of ['abc', '0', '-1', '99999999', '1e3', '9999999999999999999']) {
    const r = await p.call('PUT', `/api/profile/templates/${id}`, { key, body: base });
    assert.equal(r.status, 404, id);
    assert.deepEqual(r.body, { detail: 'Template not found' });
  }
});

test('enabled is forced false without is_editor; an editor publishes; public list shows enabled ones, a credential adds private ones', async () => {
  const mine = await p.call('POST', '/api/profile/templates', { key, body: { ...base, title: 'Private', enabled: true } });
  assert.equal(mine.body.enabled, false);
  const pub = await p.call('POST', '/api/profile/templates', { key: editorKey, body: { ...base, title: 'Published', enabled: true } });
  assert.equal(pub.body.enabled, true);

  const anon = await p.call('GET', '/api/templates');
  assert.equal(anon.status, 200);
  const anonIds = anon.body.templates.map((t: { id: number }) => t.id);
  assert.ok(anonIds.includes(pub.body.id));
  assert.ok(!anonIds.includes(mine.body.id));
  assert.ok(anon.body.templates.every((t: { enabled: boolean }) => t.enabled));
  assert.ok(
    anon.body.templates.some((t: { slug: string }) => t.slug === 'vllm-demo'),
    'seeded public templates',
  );

  const withKey = await p.call('GET', '/api/templates', { key });
  const own = withKey.body.templates.find((t: { id: number }) => t.id === mine.body.id);
  assert.equal(own.owned, true);
  assert.ok(withKey.body.templates.some((t: { id: number }) => t.id === pub.body.id));
  // A private template of someone else never shows.
  const other = await p.call('GET', '/api/templates', { key: editorKey });
  assert.ok(!other.body.templates.some((t: { id: number }) => t.id === mine.body.id));
  // A bad key is 401 even here; a stale cookie is ignored (public page).
  assert.equal((await p.call('GET', '/api/templates', { key: 'rc-' + 'x'.repeat(43) })).status, 401);
  assert.equal((await p.call('GET', '/api/templates', { cookie: 'rc_session=stale' })).status, 200);
});

test('a disabled image can no longer be chosen: 400 Invalid image selected, and it leaves the selectable list', async () => {
  await p.cp.store.images.add('Temp', 'rc/temp:1');
  assert.equal((await p.call('POST', '/api/profile/templates', { key, body: { ...base, image: 'rc/temp:1' } })).status, 200);
  await p.cp.store.images.disable('rc/temp:1');
  const r = await p.call('POST', '/api/profile/templates', { key, body: { ...base, image: 'rc/temp:1' } });
  assert.deepEqual([r.status, r.body], [400, { detail: 'Invalid image selected' }]);
  const list = await p.call('GET', '/api/profile/templates', { key });
  assert.ok(!list.body.images.some((i: { image: string }) => i.image === 'rc/temp:1'));
});

test('templates need a credential', async () => {
  assert.equal((await p.call('GET', '/api/profile/templates')).status, 401);
  assert.equal((await p.call('POST', '/api/profile/templates', { body: base })).status, 401);
});
