// The README's tables of error codes stay in step with the code (as fastify keeps lib/errors.js,
// its docs and a test together): every code in a table of the code has its README row, every
// README row names a code the code has, and no source file raises an internal code outside the
// tables. Paths are relative to the repository root, where npm test runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { quotedCodes as quoted, sourcesOf, tableAfter, unknownCodes } from '../code-tables.js';
import { CHAT_CODES, ERROR_CODES } from '../../gateway/errors.js';
import { GATE_CODES, GATE_ERROR_CODES } from '../../gateway/gates/codes.js';

const sorted = (xs: Iterable<string>): string[] => [...new Set(xs)].sort();

test('gateway/README.md "Error codes (chat routes)" lists exactly the chat codes and the gates\' codes', () => {
  const documented = tableAfter('gateway/README.md', '## Error codes (chat routes)').flatMap((r) => quoted(r[1]!));
  assert.deepEqual(sorted(documented), sorted([...Object.values(CHAT_CODES), ...Object.values(GATE_CODES)]));
});

test('gateway/README.md "Internal error codes" lists exactly ERROR_CODES, with their classes', () => {
  const rows = tableAfter('gateway/README.md', '## Internal error codes');
  assert.deepEqual(Object.fromEntries(rows.map((r) => [quoted(r[0]!)[0], r[1]])), { ...ERROR_CODES });
});

test('gateway/gates/README.md lists exactly the 429 codes and GATE_ERROR_CODES', () => {
  const codes = tableAfter('gateway/gates/README.md', '| Code (`error.code`) | Gate |').flatMap((r) => quoted(r[0]!));
  assert.deepEqual(sorted(codes), sorted(Object.values(GATE_CODES)));
  const rows = tableAfter('gateway/gates/README.md', '| Internal code | class |');
  assert.deepEqual(Object.fromEntries(rows.map((r) => [quoted(r[0]!)[0], r[1]])), { ...GATE_ERROR_CODES });
});

test('no gateway source raises an RC_ERR_ code outside the tables, or builds one at run time', () => {
  const known = new Set<string>([...Object.keys(ERROR_CODES), ...Object.keys(GATE_ERROR_CODES), 'RC_ERR_CONFIG']);
  const unknown = unknownCodes(sourcesOf('gateway'), (c) => known.has(c));
  assert.deepEqual(unknown, []);
});
