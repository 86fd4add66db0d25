// closeOnSignal (lib/cli.ts), the shutdown every server command runs: a real child process gets
// SIGTERM and must exit, with the exit code and the log line that say how its shutdown went,
// also when its close hangs, fails, or leaves a timer behind.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { firstLine } from '../helpers.js';

const CLI_JS = new URL('../../lib/cli.js', import.meta.url).href;
const LOG_JS = new URL('../../lib/log.js', import.meta.url).href;

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The log lines (JSON) the child wrote on stderr. */
  logs: { level: string; msg: string; open?: string[] }[];
}

/**
 * Runs a child whose server holds one handle (an interval, standing for its listening socket,
 * reachable as `server`) and closes with `close` (the body of an async function); sends it
 * SIGTERM `signals` times once it is ready and returns how it exited. Deadline 300 ms, exit
 * grace 200 ms.
 */
async function stopServer(close: string, signals = 1): Promise<Exit> {
  const script = `
    import { closeOnSignal } from '${CLI_JS}';
    import { createLogger } from '${LOG_JS}';
    const server = setInterval(() => {}, 1_000_000);
    const done = closeOnSignal(async () => { ${close} }, createLogger('info'), { deadlineMs: 300, exitGraceMs: 200 });
    process.stdout.write('ready\\n');
    process.exitCode = await done;
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  await firstLine(child, 'the server', { context: () => stderr });
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once('exit', (code, signal) => resolve([code, signal])));
  for (let i = 0; i < signals; i++) {
    child.kill('SIGTERM');
    if (i + 1 < signals) await new Promise((r) => setTimeout(r, 50));
  }
  const [code, signal] = await exited;
  const logs = stderr
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  return { code, signal, logs };
}

const messages = (e: Exit) => e.logs.map((l) => `${l.level}: ${l.msg}`);

test('a close that finishes and releases everything: exit code 0, only the stopping line', async () => {
  const e = await stopServer('clearInterval(server);');
  assert.equal(e.code, 0);
  assert.deepEqual(messages(e), ['info: stopping']);
});

test('a close that hangs: exit code 1 after the deadline, the error names what is still open', async () => {
  const e = await stopServer('await new Promise(() => {});');
  assert.equal(e.code, 1);
  assert.deepEqual(messages(e).slice(0, 2), ['info: stopping', 'error: shutdown did not finish in time; exiting']);
  assert.ok(e.logs[1]!.open!.includes('Timeout'), JSON.stringify(e.logs[1]));
});

test('a close that fails: exit code 1, the failure logged', async () => {
  const e = await stopServer("clearInterval(server); throw new Error('port busy');");
  assert.equal(e.code, 1);
  assert.deepEqual(messages(e), ['info: stopping', 'error: shutdown failed; exiting']);
});

test('a close that leaves a handle open: the process exits anyway after the grace, the handle named', async () => {
  const e = await stopServer('/* the interval is left running */');
  assert.equal(e.code, 0);
  assert.deepEqual(messages(e), ['info: stopping', 'warn: resources left open after the shutdown; exiting']);
  assert.ok(e.logs[1]!.open!.includes('Timeout'), JSON.stringify(e.logs[1]));
});

test('a second signal during a hanging close ends the process at once', async () => {
  const e = await stopServer('await new Promise(() => {});', 2);
  assert.equal(e.signal, 'SIGTERM');
  assert.deepEqual(messages(e), ['info: stopping']);
});
