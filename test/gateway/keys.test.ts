// The key directory: header forms, hashing, bus events, and a revoke racing the snapshot load.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { MemoryBus } from '../../lib/bus.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { AUTH_INVALID, AUTH_MISSING, fileKeySource, KeyDirectory, memoryKeySource, type KeySource } from '../../gateway/auth/keys.js';

describe('KeyDirectory', () => {
  it('resolves Bearer and x-api-key, refuses the rest', async () => {
    const key = generateKey();
    const d = new KeyDirectory();
    await d.start(memoryKeySource([{ keyHash: hashKey(key), accountId: 5 }]));
    assert.equal(d.authenticate(`Bearer ${key}`, ''), 5);
    assert.equal(d.authenticate(`bearer  ${key} `, ''), 5);
    assert.equal(d.authenticate('', key), 5);
    assert.equal(d.authenticate(`Bearer ${key}`, 'rc-other'), 5); // Bearer wins
    assert.equal(d.authenticate('', ''), AUTH_MISSING);
    assert.equal(d.authenticate('Bearer', ''), AUTH_MISSING);
    assert.equal(d.authenticate(`Bearer ${generateKey()}`, ''), AUTH_INVALID);
    assert.equal(d.authenticate(`Token ${key}`, ''), AUTH_INVALID);
    assert.equal(d.authenticate(`Bearer ${key}x`, ''), AUTH_INVALID);
    assert.equal(d.authenticate('', hashKey(key)), AUTH_INVALID); // the hash is not a key
  });

  it("checks a key's shape once per listed hash: a listed hash of a malformed key never lets it in; revoked or moved keys follow the events", async () => {
    const key = generateKey();
    const malformed = `rc-${'!'.repeat(43)}`; // the length and prefix of a key, not its alphabet
    const short = 'rc-short';
    const bus = new MemoryBus();
    const d = new KeyDirectory();
    await d.start(
      memoryKeySource([
        { keyHash: hashKey(key), accountId: 5 },
        { keyHash: hashKey(malformed), accountId: 6 },
        { keyHash: hashKey(short), accountId: 7 },
      ]),
      bus,
    );
    for (let i = 0; i < 3; i++) {
      assert.equal(d.authenticate(`Bearer ${key}`, ''), 5, `turn ${i}: the shape checked once, then the hash's verdict`);
      assert.equal(d.authenticate(`Bearer ${malformed}`, ''), AUTH_INVALID, `turn ${i}`);
      assert.equal(d.authenticate('', short), AUTH_INVALID, `turn ${i}`);
    }
    // Moved to another account: the next request sees it.
    await bus.publish({ type: 'key.issued', keyHash: hashKey(key), accountId: 9 });
    assert.equal(d.authenticate(`Bearer ${key}`, ''), 9);
    // Revoked: refused on the next request, whatever was learned of its hash.
    await bus.publish({ type: 'key.revoked', keyHash: hashKey(key), accountId: 9 });
    assert.equal(d.authenticate(`Bearer ${key}`, ''), AUTH_INVALID);
    // Issued again: a new record, checked anew.
    await bus.publish({ type: 'key.issued', keyHash: hashKey(key).toUpperCase(), accountId: 5 });
    assert.equal(d.authenticate(`Bearer ${key}`, ''), 5);
    // A resync that no longer lists it.
    d.replaceAll([{ keyHash: hashKey(malformed), accountId: 6 }]);
    assert.equal(d.authenticate(`Bearer ${key}`, ''), AUTH_INVALID);
    d.stop();
  });

  it('lists hashes by their value in any case, ignores what is not a hex SHA-256, and tells apart keys whose hashes share a first 4 bytes', async () => {
    const key = generateKey();
    // Two keys in the same bucket: found by trying keys until one's hash starts as the first one's
    // (4 bytes would take billions of tries; the bucket is the first 4 bytes, so list a made-up
    // hash with the real one's first 4 bytes and a different rest).
    const hash = hashKey(key);
    const sibling = `${hash.slice(0, 8)}${hash.slice(8).replace(/./g, (c) => (c === '0' ? '1' : '0'))}`;
    const d = new KeyDirectory();
    await d.start(
      memoryKeySource([
        { keyHash: sibling, accountId: 8 },
        { keyHash: hash.toUpperCase(), accountId: 5 },
        { keyHash: `${hash.slice(0, 63)}g`, accountId: 6 }, // not hex: ignored
        { keyHash: hash.slice(0, 62), accountId: 7 }, // too short: ignored
      ]),
    );
    assert.equal(d.size, 2);
    assert.equal(d.authenticate(`Bearer ${key}`, ''), 5);
    d.remove(sibling.toUpperCase());
    assert.equal(d.size, 1);
    assert.equal(d.authenticate(`Bearer ${key}`, ''), 5);
    d.remove(hash);
    assert.equal(d.size, 0);
    assert.equal(d.authenticate(`Bearer ${key}`, ''), AUTH_INVALID);
  });

  it('applies a revoke that arrives while the snapshot loads after the snapshot', async () => {
    const key = generateKey();
    const bus = new MemoryBus();
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const slow: KeySource = {
      load: async () => {
        await gate;
        return [{ keyHash: hashKey(key), accountId: 1 }];
      },
    };
    const d = new KeyDirectory();
    const started = d.start(slow, bus);
    await bus.publish({ type: 'key.revoked', keyHash: hashKey(key), accountId: 1 });
    release();
    await started;
    assert.equal(d.authenticate(`Bearer ${key}`, ''), AUTH_INVALID);
    assert.equal(d.size, 0);
    d.stop();
  });

  it('reads a keys file and reports a bad one clearly', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rc-keys-'));
    try {
      const key = generateKey();
      const ok = join(dir, 'ok.json');
      writeFileSync(ok, JSON.stringify([{ keyHash: hashKey(key), accountId: 9 }]));
      const d = new KeyDirectory();
      await d.start(fileKeySource(ok));
      assert.equal(d.authenticate('', key), 9);
      const bad = join(dir, 'bad.json');
      writeFileSync(bad, JSON.stringify([{ keyHash: hashKey(key), accountId: 'nine' }]));
      await assert.rejects(new KeyDirectory().start(fileKeySource(bad)), /keys file .*accountId/);
      await assert.rejects(new KeyDirectory().start(fileKeySource(join(dir, 'missing.json'))), /keys file/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
