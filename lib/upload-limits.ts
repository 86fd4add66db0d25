// Request bodies in flight, bounded per client address, per account and, on the dedicated
// endpoints, per instance (issue 44: 192 uploads
// that declared 8 MiB and withheld their last byte held 1.3 GiB of the gateway, each within the
// per-request limit). A body is "in flight" from its first byte until it is whole (or refused, or
// its client goes): after that the request holds an in-flight slot of its own (admission).
//
// - Concurrent uploads: a body that did not arrive whole with its headers counts as one upload of
//   its address and of its account (and of its instance) while it is incomplete. Bodies that come in one read (almost
//   every API call) never count, so high-concurrency clients are not refused for their number.
// - Bytes in flight: what incomplete bodies have received so far (memory follows the bytes that
//   arrive, never the declared length: lib/http.ts readBody grows its buffer as they come).
//
// Past a limit the request is refused with 429 and Retry-After (the route's own error shape) and
// its connection closed (its body is unread); the bytes it held are freed at once.
//
// Where the body arrives before its owner is known (the instance proxy reads it while the session
// is looked up), an upload starts counted per address only and `claim` charges what it holds to
// its account and instance once they are known, so nobody can fill another tenant's counts.

export interface UploadLimitSettings {
  /** Incomplete request bodies per client address (RC_GATEWAY_UPLOADS_PER_ADDRESS). */
  uploadsPerAddress: number;
  /** Incomplete request bodies per account (RC_GATEWAY_UPLOADS_PER_ACCOUNT). */
  uploadsPerAccount: number;
  /** Bytes of incomplete request bodies per client address (RC_GATEWAY_UPLOAD_BYTES_PER_ADDRESS). */
  bytesPerAddress: number;
  /** Bytes of incomplete request bodies per account (RC_GATEWAY_UPLOAD_BYTES_PER_ACCOUNT). */
  bytesPerAccount: number;
  /** Incomplete request bodies per instance, on its dedicated endpoints (RC_DEDICATED_UPLOADS_PER_INSTANCE). */
  uploadsPerInstance: number;
  /** Bytes of incomplete request bodies per instance (RC_DEDICATED_UPLOAD_BYTES_PER_INSTANCE). */
  bytesPerInstance: number;
}

/** The settings' names, for the refusal messages (each part has its own: the gateway's, the proxy's). */
export interface UploadSettingNames {
  uploadsPerAddress: string;
  uploadsPerAccount: string;
  bytesPerAddress: string;
  bytesPerAccount: string;
  uploadsPerInstance: string;
  bytesPerInstance: string;
}

export const GATEWAY_UPLOAD_SETTINGS: UploadSettingNames = {
  uploadsPerAddress: 'RC_GATEWAY_UPLOADS_PER_ADDRESS',
  uploadsPerAccount: 'RC_GATEWAY_UPLOADS_PER_ACCOUNT',
  bytesPerAddress: 'RC_GATEWAY_UPLOAD_BYTES_PER_ADDRESS',
  bytesPerAccount: 'RC_GATEWAY_UPLOAD_BYTES_PER_ACCOUNT',
  uploadsPerInstance: 'RC_DEDICATED_UPLOADS_PER_INSTANCE',
  bytesPerInstance: 'RC_DEDICATED_UPLOAD_BYTES_PER_INSTANCE',
};

export const DEFAULT_UPLOAD_LIMITS: UploadLimitSettings = {
  uploadsPerAddress: 256,
  uploadsPerAccount: 128,
  bytesPerAddress: 256 * 1024 * 1024,
  bytesPerAccount: 128 * 1024 * 1024,
  uploadsPerInstance: 64,
  bytesPerInstance: 64 * 1024 * 1024,
};

/** Seconds a refused client is told to wait: uploads in flight finish or time out within seconds. */
export const UPLOAD_RETRY_AFTER_SEC = 5;

/** Why an upload was refused: the message the client gets. */
export class UploadRefusal {
  readonly retryAfterSec = UPLOAD_RETRY_AFTER_SEC;
  constructor(readonly message: string) {}
}

interface Held {
  uploads: number;
  bytes: number;
}

/** One request body while it arrives: what it holds against its address and account (and instance). */
export class Upload {
  /** Counted as an upload (it did not arrive whole at once). */
  counted = false;
  bytes = 0;
  done = false;

  constructor(
    private readonly limits: UploadLimits,
    readonly address: string,
    /** '': not known yet (counted per address only until `claim`). */
    public accountKey: string,
    /** The dedicated endpoint's instance; '': not counted per instance (the shared model routes). */
    public instanceKey: string,
  ) {}

  /**
   * The body's owner is known now: what it holds so far (and what arrives from now on) counts
   * against `accountId` and `instanceId` too. Undefined when that fits; else the refusal (what
   * this upload held is released). Once per upload, on one started without an account.
   */
  claim(accountId: number, instanceId = ''): UploadRefusal | undefined {
    if (this.done || this.accountKey !== '') return undefined;
    this.accountKey = String(accountId);
    this.instanceKey = instanceId;
    if (!this.counted) return undefined;
    const refusal = this.limits.charge(this);
    if (refusal) {
      // Nothing was charged to the owner: only the address's part is given back.
      this.accountKey = '';
      this.instanceKey = '';
      this.release();
    }
    return refusal;
  }

  /**
   * `n` more bytes arrived (`last`: the body is whole with them). Undefined when they fit; else
   * the refusal (what this upload held is released).
   */
  received(n: number, last: boolean): UploadRefusal | undefined {
    if (this.done) return undefined;
    if (last && !this.counted) {
      // Whole in its first read: never in flight.
      this.done = true;
      return undefined;
    }
    const refusal = this.limits.take(this, n);
    if (refusal) this.release();
    else if (last) this.release();
    return refusal;
  }

  /** The body is whole, refused, or its client went away: what it held is free. Idempotent. */
  release(): void {
    if (this.done) return;
    this.done = true;
    this.limits.give(this);
  }
}

export class UploadLimits {
  private readonly byAddress = new Map<string, Held>();
  private readonly byAccount = new Map<string, Held>();
  private readonly byInstance = new Map<string, Held>();

  constructor(
    readonly settings: UploadLimitSettings = DEFAULT_UPLOAD_LIMITS,
    private readonly names: UploadSettingNames = GATEWAY_UPLOAD_SETTINGS,
  ) {}

  /**
   * A body of `address`'s request for `accountId` (to instance `instanceId`, on a dedicated
   * endpoint) starts arriving. `accountId` undefined: its owner is not known yet (Upload.claim).
   */
  start(address: string, accountId?: number, instanceId = ''): Upload {
    return new Upload(this, address, accountId === undefined ? '' : String(accountId), accountId === undefined ? '' : instanceId);
  }

  /** Counts `n` more bytes (and the upload itself, the first time); the refusal when a limit is passed. */
  take(u: Upload, n: number): UploadRefusal | undefined {
    const more = u.counted ? 0 : 1;
    const a = this.byAddress.get(u.address) ?? { uploads: 0, bytes: 0 };
    const refusal = this.refusal(u, a, more, n);
    if (refusal) return refusal;
    a.uploads += more;
    a.bytes += n;
    this.byAddress.set(u.address, a);
    this.add(this.byAccount, u.accountKey, more, n);
    this.add(this.byInstance, u.instanceKey, more, n);
    u.counted = true;
    u.bytes += n;
    return undefined;
  }

  /** Charges what a claimed upload holds to its account and instance (Upload.claim); the refusal when that passes a limit. */
  charge(u: Upload): UploadRefusal | undefined {
    const refusal = this.refusal(u, undefined, 1, u.bytes);
    if (refusal) return refusal;
    this.add(this.byAccount, u.accountKey, 1, u.bytes);
    this.add(this.byInstance, u.instanceKey, 1, u.bytes);
    return undefined;
  }

  /**
   * Whether `more` uploads and `n` bytes pass a limit of the instance, the address (`a`; undefined:
   * not checked) or the account, in that order ('' keys are not counted).
   */
  private refusal(u: Upload, a: Held | undefined, more: number, n: number): UploadRefusal | undefined {
    const s = this.settings;
    const names = this.names;
    const i = u.instanceKey === '' ? undefined : (this.byInstance.get(u.instanceKey) ?? { uploads: 0, bytes: 0 });
    const c = u.accountKey === '' ? undefined : (this.byAccount.get(u.accountKey) ?? { uploads: 0, bytes: 0 });
    const tooMany = (what: string, owner: string, max: number, setting: string) =>
      new UploadRefusal(`Too many ${what} in flight ${owner}: at most ${max} (${setting})`);
    if (i && i.uploads + more > s.uploadsPerInstance) return tooMany('uploads', 'for this instance', s.uploadsPerInstance, names.uploadsPerInstance);
    if (i && i.bytes + n > s.bytesPerInstance) return tooMany('request body bytes', 'for this instance', s.bytesPerInstance, names.bytesPerInstance);
    if (a && a.uploads + more > s.uploadsPerAddress) return tooMany('uploads', 'from this address', s.uploadsPerAddress, names.uploadsPerAddress);
    if (c && c.uploads + more > s.uploadsPerAccount) return tooMany('uploads', 'for this account', s.uploadsPerAccount, names.uploadsPerAccount);
    if (a && a.bytes + n > s.bytesPerAddress) return tooMany('request body bytes', 'from this address', s.bytesPerAddress, names.bytesPerAddress);
    if (c && c.bytes + n > s.bytesPerAccount) return tooMany('request body bytes', 'for this account', s.bytesPerAccount, names.bytesPerAccount);
    return undefined;
  }

  private add(map: Map<string, Held>, key: string, more: number, n: number): void {
    if (key === '') return;
    const h = map.get(key) ?? { uploads: 0, bytes: 0 };
    h.uploads += more;
    h.bytes += n;
    map.set(key, h);
  }

  /** Gives back what `u` held. */
  give(u: Upload): void {
    if (!u.counted) return;
    drop(this.byAddress, u.address, u.bytes);
    if (u.accountKey !== '') drop(this.byAccount, u.accountKey, u.bytes);
    if (u.instanceKey !== '') drop(this.byInstance, u.instanceKey, u.bytes);
    u.counted = false;
    u.bytes = 0;
  }

  /** What is held now (tests, metrics): entries and their sums. */
  held(): { addresses: number; accounts: number; instances: number; uploads: number; bytes: number } {
    let uploads = 0;
    let bytes = 0;
    for (const h of this.byAddress.values()) {
      uploads += h.uploads;
      bytes += h.bytes;
    }
    return { addresses: this.byAddress.size, accounts: this.byAccount.size, instances: this.byInstance.size, uploads, bytes };
  }
}

function drop(map: Map<string, Held>, key: string, bytes: number): void {
  const h = map.get(key);
  if (!h) return;
  h.uploads--;
  h.bytes -= bytes;
  if (h.uploads <= 0) map.delete(key);
}
