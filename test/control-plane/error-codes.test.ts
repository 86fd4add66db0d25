// The control plane's error table (control-plane/errors.ts API_ERRORS) and control-plane/README.md
// stay in step, as test/gateway/error-codes.test.ts does for the gateway: every row has its README
// row and the other way round, every row is raised somewhere, codes are unique, each constant
// message is written only in the table, and no source raises a code or builds an ApiError outside
// it. Paths are relative to the repository root, where npm test runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AnyFailure } from '../../control-plane/api-error.js';
import { quotedCodes as quoted, sourcesOf, tableAfter } from '../code-tables.js';
import { API_ERRORS, INTERNAL_ERROR_CODES, REVIEW_REDIRECT } from '../../control-plane/errors.js';

const README = 'control-plane/README.md';
const TABLE = 'control-plane/errors.ts';
const rows = Object.entries(API_ERRORS) as [string, AnyFailure][];

test('control-plane/README.md "Error codes" lists exactly API_ERRORS: internal code, public code, status', () => {
  const documented = Object.fromEntries(
    tableAfter(README, '## Error codes').map((r) => [quoted(r[0]!)[0], { publicCode: quoted(r[1]!)[0], status: Number(r[2]) }]),
  );
  const declared = Object.fromEntries(rows.map(([, f]) => [f.code, { publicCode: f.publicCode, status: f.status }]));
  assert.deepEqual(documented, declared);
});

test('control-plane/README.md "Error codes" gives each constant message as the table words it', () => {
  const cells = new Map(tableAfter(README, '## Error codes').map((r) => [quoted(r[0]!)[0], r[3]!]));
  const wrong = rows
    .filter(([, f]) => typeof f.message === 'string' && !cells.get(f.code)?.startsWith(`\`${f.message}\``))
    .map(([name, f]) => `${name}: ${f.message}`);
  assert.deepEqual(wrong, []);
});

test('control-plane/README.md "Internal error codes" lists exactly INTERNAL_ERROR_CODES, with their classes', () => {
  const documented = tableAfter(README, '## Internal error codes');
  assert.deepEqual(Object.fromEntries(documented.map((r) => [quoted(r[0]!)[0], r[1]])), { ...INTERNAL_ERROR_CODES });
});

test('internal codes are RC_ERR_* and unique; public codes are snake_case and name one row each', () => {
  const internal = [...rows.map(([, f]) => f.code), ...Object.keys(INTERNAL_ERROR_CODES)];
  for (const c of internal) assert.match(c, /^RC_ERR_[A-Z_]+$/);
  assert.equal(new Set(internal).size, internal.length, 'an internal code is declared twice');
  const publicCodes = rows.flatMap(([, f]) => (f.publicCode ? [f.publicCode] : []));
  for (const c of publicCodes) assert.match(c, /^[a-z]+(_[a-z]+)*$/);
  assert.equal(new Set(publicCodes).size, publicCodes.length, 'a public code names two rows');
});

test('every row is raised somewhere: called by name, or (transitional) named by its code', () => {
  const others = sourcesOf('control-plane').filter((s) => s.path !== TABLE);
  const unreached = rows
    .filter(
      ([name, f]) =>
        !others.some(
          (s) =>
            s.text.includes(`API_ERRORS.${name}`) || s.text.includes(`'${f.code}'`) || (f.publicCode !== undefined && s.text.includes(`'${f.publicCode}'`)),
        ),
    )
    .map(([name]) => name);
  assert.deepEqual(unreached, []);
});

/**
 * Messages still written in the instance files that the instances split (issue #29) re-points at
 * their rows; remove an entry once its file calls the row (the test fails on a stale entry).
 */
test('each constant message is written once, in the table', () => {
  const messages = rows.flatMap(([, f]) => (typeof f.message === 'string' ? [f.message] : []));
  const copies: string[] = [];
  for (const s of sourcesOf('control-plane')) {
    if (s.path === TABLE) continue;
    for (const m of messages) if ([`'${m}'`, `"${m}"`, `\`${m}\``].some((q) => s.text.includes(q))) copies.push(`${s.path}: ${m}`);
  }
  assert.deepEqual(copies.sort(), []);
});

test('no control-plane source raises an RC_ERR_ code outside the tables, builds one at run time, or makes an ApiError itself', () => {
  const known = new Set<string>([...rows.map(([, f]) => f.code), ...Object.keys(INTERNAL_ERROR_CODES)]);
  const unknown: string[] = [];
  for (const { path, text } of sourcesOf('control-plane')) {
    // RC_ERR_AGENT_*: the agent's codes, which the instance service reads from AgentCallError.
    for (const m of text.matchAll(/RC_ERR_[A-Z][A-Z_]*/g)) if (!known.has(m[0]) && !m[0].startsWith('RC_ERR_AGENT_')) unknown.push(`${path}: ${m[0]}`);
    // api-error.ts declares the codes' type, `RC_ERR_${string}`.
    if (path !== 'control-plane/api-error.ts' && /`RC_ERR_[A-Z_]*\$\{/.test(text)) unknown.push(`${path}: a code built at run time`);
    if (path !== 'control-plane/api-error.ts' && text.includes('new ApiError(')) unknown.push(`${path}: new ApiError outside the table`);
  }
  assert.deepEqual(unknown, []);
});

test('a raised row keeps the internal code apart from the public one; coded rows carry the public code in detail', () => {
  const coupon = API_ERRORS.couponInvalid();
  assert.deepEqual(
    { code: coupon.code, publicCode: coupon.publicCode, status: coupon.status, detail: coupon.detail, message: coupon.message },
    { code: 'RC_ERR_COUPON_INVALID', publicCode: 'coupon_invalid', status: 400, detail: 'Invalid coupon code', message: 'Invalid coupon code' },
  );
  assert.deepEqual(API_ERRORS.accountNotVerified().detail, {
    code: 'account_not_verified',
    message: 'Your account is under review; this needs a verified account',
    redirect: REVIEW_REDIRECT,
  });
  assert.deepEqual(API_ERRORS.emailVerificationRequired().detail, {
    code: 'email_verification_required',
    message: API_ERRORS.emailVerificationRequired.message,
  });
  const limited = API_ERRORS.launchRateLimited(60);
  assert.deepEqual([limited.status, limited.detail, limited.headers], [429, 'Too many launches; retry after 60 seconds', { 'retry-after': '60' }]);
  const refused = API_ERRORS.instanceRefusedWebSocket(401);
  assert.deepEqual([refused.status, refused.detail], [401, 'The instance refused the WebSocket (HTTP 401)']);
  assert.equal(API_ERRORS.instanceRefusedWebSocket(undefined).status, 502);
});
