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
    readonly accountKey: string,
    /** The dedicated endpoint's instance; '': not counted per instance (the shared model routes). */
    readonly instanceKey: string,
  ) {}

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

  constructor(readonly settings: UploadLimitSettings = DEFAULT_UPLOAD_LIMITS) {}

  /** A body of `address`'s request for `accountId` (to instance `instanceId`, on a dedicated endpoint) starts arriving. */
  start(address: string, accountId: number, instanceId = ''): Upload {
    return new Upload(this, address, String(accountId), instanceId);
  }

  /** Counts `n` more bytes (and the upload itself, the first time); the refusal when a limit is passed. */
  take(u: Upload, n: number): UploadRefusal | undefined {
    const s = this.settings;
    const a = this.byAddress.get(u.address) ?? { uploads: 0, bytes: 0 };
    const c = this.byAccount.get(u.accountKey) ?? { uploads: 0, bytes: 0 };
    const more = u.counted ? 0 : 1;
    const i = u.instanceKey === '' ? undefined : (this.byInstance.get(u.instanceKey) ?? { uploads: 0, bytes: 0 });
    if (i && i.uploads + more > s.uploadsPerInstance)
      return new UploadRefusal(`Too many uploads in flight for this instance: at most ${s.uploadsPerInstance} (RC_DEDICATED_UPLOADS_PER_INSTANCE)`);
    if (i && i.bytes + n > s.bytesPerInstance)
      return new UploadRefusal(
        `Too many request body bytes in flight for this instance: at most ${s.bytesPerInstance} (RC_DEDICATED_UPLOAD_BYTES_PER_INSTANCE)`,
      );
    if (a.uploads + more > s.uploadsPerAddress)
      return new UploadRefusal(`Too many uploads in flight from this address: at most ${s.uploadsPerAddress} (RC_GATEWAY_UPLOADS_PER_ADDRESS)`);
    if (c.uploads + more > s.uploadsPerAccount)
      return new UploadRefusal(`Too many uploads in flight for this account: at most ${s.uploadsPerAccount} (RC_GATEWAY_UPLOADS_PER_ACCOUNT)`);
    if (a.bytes + n > s.bytesPerAddress)
      return new UploadRefusal(`Too many request body bytes in flight from this address: at most ${s.bytesPerAddress} (RC_GATEWAY_UPLOAD_BYTES_PER_ADDRESS)`);
    if (c.bytes + n > s.bytesPerAccount)
      return new UploadRefusal(`Too many request body bytes in flight for this account: at most ${s.bytesPerAccount} (RC_GATEWAY_UPLOAD_BYTES_PER_ACCOUNT)`);
    a.uploads += more;
    c.uploads += more;
    a.bytes += n;
    c.bytes += n;
    this.byAddress.set(u.address, a);
    this.byAccount.set(u.accountKey, c);
    if (i) {
      i.uploads += more;
      i.bytes += n;
      this.byInstance.set(u.instanceKey, i);
    }
    u.counted = true;
    u.bytes += n;
    return undefined;
  }

  /** Gives back what `u` held. */
  give(u: Upload): void {
    if (!u.counted) return;
    drop(this.byAddress, u.address, u.bytes);
    drop(this.byAccount, u.accountKey, u.bytes);
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
