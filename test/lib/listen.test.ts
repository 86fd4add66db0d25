// A listening port belongs to one process (issue 27): uWS shares ports silently (SO_REUSEPORT)
// unless told otherwise, so two platforms on one machine used to split each other's traffic.
// Every server of ours binds exclusively; a second one fails at start naming the port and setting.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { startPlatform, type Platform } from '../../bin/platform.js';
import { loadConfig } from '../../lib/config.js';
import { ListenError } from '../../lib/errors.js';
import { listen, sendJson, type Server } from '../../lib/http.js';
import { createLogger } from '../../lib/log.js';
import { uws } from '../../lib/uws.js';
import { platformTestEnv, waitFor } from '../helpers.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));

function app(name: string) {
  const a = uws().App();
  a.get('/*', (res) => sendJson(res as never, 200, JSON.stringify({ name })));
  return a;
}

test('a uWS port in use is a ListenError naming the port and the reason; reusePort shares only when both ask', async (t) => {
  const first = await listen(app('first'), '127.0.0.1', 0);
  t.after(() => first.close());
  await assert.rejects(listen(app('second'), '127.0.0.1', first.port), (err: unknown) => {
    assert.ok(err instanceof ListenError);
    assert.equal(err.code, 'RC_ERR_LISTEN');
    assert.equal(err.reason, 'EADDRINUSE');
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${first.port}: the port is in use by another process`));
    assert.match(err.naming('RC_GATEWAY_PORT').message, /\(set RC_GATEWAY_PORT to another port\)$/);
    return true;
  });
  // Asking to share does not get into a port its owner holds alone.
  await assert.rejects(listen(app('sharer'), '127.0.0.1', first.port, undefined, { reusePort: true }), ListenError);
  for (let i = 0; i < 20; i++) {
    const r = await fetch(first.url);
    assert.equal(((await r.json()) as { name: string }).name, 'first', 'every request reaches the owner');
  }

  // Processes that all ask to share (rc gateway replicas with RC_GATEWAY_REUSE_PORT) may.
  // (On a port the kernel picked, uWS does not share: take a free port first.)
  const free = await listen(app('probe'), '127.0.0.1', 0);
  await free.close();
  const a: Server = await listen(app('a'), '127.0.0.1', free.port, undefined, { reusePort: true });
  t.after(() => a.close());
  const b: Server = await listen(app('b'), '127.0.0.1', a.port, undefined, { reusePort: true });
  t.after(() => b.close());
  assert.equal(b.port, a.port);
});

test('a second platform on a port in use fails at start, naming the port and its setting, and the first keeps all traffic', async (t) => {
  const dirs: string[] = [];
  const dataDir = () => {
    const d = mkdtempSync(join(tmpdir(), 'rc-listen-'));
    dirs.push(d);
    return d;
  };
  t.after(() => {
    for (const d of dirs) {
      rmSync(d, { recursive: true, force: true });
      rmSync(`${d}-instances`, { recursive: true, force: true });
    }
  });
  const logger = createLogger('silent');
  const first: Platform = await startPlatform(loadConfig(platformTestEnv(dataDir())), logger);
  t.after(() => first.close());
  const portOf = (url: string) => new URL(url).port;
  const taken: Record<string, string> = {
    RC_API_PORT: portOf(first.controlPlane.url),
    RC_GATEWAY_PORT: String(first.gateway.port),
    RC_METRICS_PORT: portOf(first.gateway.metricsUrl),
    RC_CONTROL_METRICS_PORT: portOf(first.controlMetrics.url),
    RC_PROXY_PORT: portOf(first.proxy.url),
    RC_TUNNEL_PORT: portOf(first.tunnels.url),
    RC_SIM_PORT_BASE: portOf(first.sims[0]!.url),
    RC_AGENT_PORT: first.agent.address.split(':').at(-1)!,
  };
  for (const [setting, port] of Object.entries(taken)) {
    await assert.rejects(
      startPlatform(loadConfig(platformTestEnv(dataDir(), { [setting]: port })), logger),
      (err: unknown) => {
        assert.ok(err instanceof ListenError, `${setting}: ${String(err)}`);
        assert.equal(err.port, Number(port));
        assert.equal(err.setting, setting);
        assert.match(err.message, new RegExp(`:${port}: the port is in use by another process \\(set ${setting} to another port\\)`));
        return true;
      },
      setting,
    );
  }
  // Nothing of the failed starts is left listening beside the first platform.
  for (let i = 0; i < 10; i++) assert.equal((await fetch(`${first.gateway.url}/health`)).status, 200);

  // The CLI says it and exits non-zero (what an operator sees).
  const env = { ...process.env, ...platformTestEnv(dataDir(), { RC_GATEWAY_PORT: taken.RC_GATEWAY_PORT! }), RC_LOG_LEVEL: 'silent' };
  const child = spawn(process.execPath, [RC, 'start'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d));
  const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  await waitFor(() => err.includes('RC_ERR_LISTEN'), 5000).catch(() => undefined);
  assert.notEqual(code, 0);
  assert.match(
    err,
    new RegExp(
      `rc start: Could not listen on 127\\.0\\.0\\.1:${taken.RC_GATEWAY_PORT}: the port is in use by another process \\(set RC_GATEWAY_PORT to another port\\) \\(RC_ERR_LISTEN\\)`,
    ),
  );
});
