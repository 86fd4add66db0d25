// lib/upload-limits.ts: an upload whose owner is not known yet (the instance proxy reads a body
// while it looks the session up) counts per address only, and `claim` charges what it holds to
// its account and instance, or refuses without leaving anything charged; refusals name the
// settings the part was given.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_UPLOAD_LIMITS, UploadLimits, type UploadSettingNames } from '../../lib/upload-limits.js';

const NAMES: UploadSettingNames = {
  uploadsPerAddress: 'A_UPLOADS',
  uploadsPerAccount: 'C_UPLOADS',
  uploadsPerInstance: 'I_UPLOADS',
  bytesPerAddress: 'A_BYTES',
  bytesPerAccount: 'C_BYTES',
  bytesPerInstance: 'I_BYTES',
};

test('an upload started without its owner counts per address, and claim charges its account and instance', () => {
  const limits = new UploadLimits({ ...DEFAULT_UPLOAD_LIMITS, bytesPerInstance: 100 }, NAMES);
  const u = limits.start('10.0.0.1');
  assert.equal(u.received(60, false), undefined);
  assert.deepEqual(limits.held(), { addresses: 1, accounts: 0, instances: 0, uploads: 1, bytes: 60 });
  assert.equal(u.claim(7, 'i-1'), undefined);
  assert.deepEqual(limits.held(), { addresses: 1, accounts: 1, instances: 1, uploads: 1, bytes: 60 });
  // What arrives after the claim counts for the owner too.
  assert.equal(u.received(30, false), undefined);
  const past = u.received(20, false);
  assert.equal(past?.message, 'Too many request body bytes in flight for this instance: at most 100 (I_BYTES)');
  assert.deepEqual(limits.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
});

test("a claim past the owner's bound refuses and gives back the address's part only", () => {
  const limits = new UploadLimits({ ...DEFAULT_UPLOAD_LIMITS, bytesPerAccount: 100 }, NAMES);
  const held = limits.start('10.0.0.2', 7, 'i-1');
  assert.equal(held.received(80, false), undefined);
  const u = limits.start('10.0.0.1');
  assert.equal(u.received(50, false), undefined);
  assert.equal(u.claim(7, 'i-2')?.message, 'Too many request body bytes in flight for this account: at most 100 (C_BYTES)');
  // The other upload of the account is as it was; the refused one holds nothing anywhere.
  assert.deepEqual(limits.held(), { addresses: 1, accounts: 1, instances: 1, uploads: 1, bytes: 80 });
  u.release();
  held.release();
  assert.deepEqual(limits.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
});

test('a claim before the first chunk waits: the body is whole in one read, or counts for its owner from its first byte', () => {
  const limits = new UploadLimits(DEFAULT_UPLOAD_LIMITS, NAMES);
  const whole = limits.start('10.0.0.1');
  assert.equal(whole.claim(7, 'i-1'), undefined);
  assert.equal(whole.received(10, true), undefined);
  assert.deepEqual(limits.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
  const slow = limits.start('10.0.0.1');
  assert.equal(slow.claim(7, 'i-1'), undefined);
  assert.equal(slow.received(10, false), undefined);
  assert.deepEqual(limits.held(), { addresses: 1, accounts: 1, instances: 1, uploads: 1, bytes: 10 });
  assert.equal(slow.received(5, true), undefined);
  assert.deepEqual(limits.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
});
