// GET /api/openapi.json matches the routes: every route declared in the control plane's sources
// is documented, and every documented operation is served by the running server (not the
// router's catch-all 404 or a 405). Request schemas are the zod schemas the router validates with.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { startPlatform } from '../instances/harness.js';

const SOURCES = fileURLToPath(new URL('../../../control-plane/', import.meta.url));
const METHOD: Record<string, string> = { get: 'get', post: 'post', put: 'put', del: 'delete' };

/** "get /api/me" for every `route({ method, path })` written in the control plane's TypeScript sources. */
function declaredRoutes(): Set<string> {
  const out = new Set<string>();
  for (const file of readdirSync(SOURCES, { recursive: true }) as string[]) {
    if (!file.endsWith('.ts')) continue;
    const text = readFileSync(join(SOURCES, file), 'utf8');
    for (const m of text.matchAll(/method: '(get|post|put|del)',\s*path: '([^']+)'/g)) out.add(`${METHOD[m[1]!]} ${m[2]!.replace(/:(\w+)/g, '{$1}')}`);
  }
  return out;
}

test('openapi.json documents exactly the served routes, with the request schemas', async (t) => {
  const p = await startPlatform(t);
  const r = await p.call('GET', '/api/openapi.json');
  assert.equal(r.status, 200);
  const doc = r.body as { openapi: string; paths: Record<string, Record<string, any>> }; // eslint-disable-line @typescript-eslint/no-explicit-any
  assert.equal(doc.openapi, '3.1.0');

  const documented = new Set<string>();
  for (const [path, ops] of Object.entries(doc.paths)) for (const method of Object.keys(ops)) documented.add(`${method} ${path}`);
  const declared = declaredRoutes();
  assert.ok(declared.size > 25, `found ${declared.size} route declarations`);
  assert.deepEqual(
    [...declared].filter((x) => !documented.has(x)),
    [],
    'declared but not documented',
  );
  assert.deepEqual(
    [...documented].filter((x) => !declared.has(x)),
    [],
    'documented but not declared',
  );

  // Every documented operation is served (the check can fail: an unknown path is the catch-all).
  const served = async (method: string, path: string) => {
    const res = await request(p.cp.url + path.replace(/\{\w+\}/g, '1'), {
      method: method.toUpperCase() as 'GET',
      headers: { 'content-type': 'application/json' },
      body: method === 'get' ? undefined : '{}',
    });
    const text = await res.body.text();
    return !(res.statusCode === 405 || (res.statusCode === 404 && text === '{"detail":"Not Found"}'));
  };
  assert.equal(await served('get', '/api/no-such-route'), false);
  assert.equal(await served('delete', '/api/me'), false);
  for (const op of documented) {
    const [method, path] = op.split(' ') as [string, string];
    assert.ok(await served(method, path), `${op} is documented but not served`);
  }

  // The schemas are the validators': required fields, enums, bounds, query parameters, credentials.
  const create = doc.paths['/api/profile/templates']!.post;
  const schema = create.requestBody.content['application/json'].schema;
  assert.deepEqual(schema.required.sort(), ['image', 'title']);
  assert.deepEqual(schema.properties.instance_type.enum, ['jupyter', 'gradio', 'streamlit', 'comfyui', 'vllm', 'sglang', 'custom']);
  assert.equal(schema.properties.disk_gb.minimum, 100);
  assert.equal(schema.properties.disk_gb.maximum, 200);
  assert.equal(schema.additionalProperties, false);
  assert.deepEqual(create.security, [{ bearer: [] }, { session: [] }]);
  const ledger = doc.paths['/api/credits/ledger']!.get;
  assert.deepEqual(
    ledger.parameters.map((x: { name: string; in: string }) => `${x.in}:${x.name}`),
    ['query:limit', 'query:before'],
  );
  const logs = doc.paths['/api/notebook/logs']!.get;
  assert.ok(logs.responses['200'].content['text/event-stream']);
  assert.deepEqual(doc.paths['/api/profile/templates/{id}']!.put.parameters[0], { name: 'id', in: 'path', required: true, schema: { type: 'string' } });
  assert.deepEqual(doc.paths['/api/health']!.get.security, []);
  assert.equal(doc.paths['/api/me']!.get.summary, 'The account profile; `credits` is the live balance');
  assert.deepEqual(doc.paths['/api/admin/{op}']!.post.security, [{ adminToken: [] }]);
  assert.ok(doc.paths['/api/templates/{id}/launch']!.post.requestBody.required === false);
});
