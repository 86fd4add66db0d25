// Issue 44: at the process's descriptor limit the agent's state writes and firewall refresh (a
// child process) still work, from the descriptors held back for them (agent/fd-reserve.ts). Run
// in a child process under `prlimit --nofile=128`, which then opens descriptors until EMFILE.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const STATE_JS = fileURLToPath(new URL('../../agent/state.js', import.meta.url));
const RESERVE_JS = fileURLToPath(new URL('../../agent/fd-reserve.js', import.meta.url));

const CHILD = `
import { execFile } from 'node:child_process';
import { openSync, writeFileSync } from 'node:fs';
const { StateStore } = await import(process.argv[1]);
const { descriptorReserve } = await import(process.argv[2]);
const dir = process.argv[3];
const store = new StateStore(dir, () => 'agent_test'); // its first save fills the reserve
const out = { reserved: descriptorReserve.held };
let filler = 0;
for (;;) { try { openSync('/dev/null', 'r'); filler++; } catch (err) { out.fillerError = err.code; break; } }
out.filler = filler;
try { writeFileSync(dir + '/plain', 'x'); out.plainWrite = 'ok'; } catch (err) { out.plainWrite = err.code; }
store.state.seq = 42;
try { store.save(); out.save = 'ok'; } catch (err) { out.save = err.code; }
out.child = await new Promise((resolve) => {
  try {
    descriptorReserve.around(() => execFile('/bin/echo', ['spawned'], (err, stdout) => resolve(err ? err.code : stdout.trim())));
  } catch (err) { resolve(err.code); }
});
process.stdout.write(JSON.stringify(out));
`;

test('at the descriptor limit, the state file is written and a child process starts from the reserve', (t) => {
  if (!existsSync('/usr/bin/prlimit')) {
    t.skip('prlimit (util-linux) is not installed');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'rc-fd-reserve-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const stdout = execFileSync('/usr/bin/prlimit', ['--nofile=128:128', process.execPath, '--input-type=module', '-e', CHILD, STATE_JS, RESERVE_JS, dir], {
    encoding: 'utf8',
  });
  const out = JSON.parse(stdout) as Record<string, unknown>;
  assert.equal(out.reserved, 16, 'the reserve holds its descriptors');
  assert.equal(out.fillerError, 'EMFILE', 'the process reached its limit');
  assert.equal(out.plainWrite, 'EMFILE', 'a write without the reserve fails there');
  assert.equal(out.save, 'ok', 'the state file is written from the reserve');
  assert.equal((JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as { seq: number }).seq, 42);
  assert.equal(out.child, 'spawned', 'a child process (the firewall refresh runs iptables so) starts from the reserve');
});
