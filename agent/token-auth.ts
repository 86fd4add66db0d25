// The shared token every call to the agent carries: `authorization: Bearer <token>` metadata,
// compared in constant time (SHA-256 digests, so the lengths are equal whatever was sent).
import type * as grpc from '@grpc/grpc-js';
import { createHash, timingSafeEqual } from 'node:crypto';
import { AgentUnauthenticatedError } from './errors.js';
import { AUTH_METADATA_KEY } from './service.js';

const digest = (s: string) => createHash('sha256').update(s).digest();

export class TokenAuth {
  private readonly expected: Buffer;

  constructor(token: string) {
    this.expected = digest(`Bearer ${token}`);
  }

  /** Throws AgentUnauthenticatedError unless the call's metadata carries the token. */
  check(metadata: grpc.Metadata): void {
    const given = metadata.get(AUTH_METADATA_KEY)[0];
    if (typeof given !== 'string' || !timingSafeEqual(digest(given), this.expected)) throw new AgentUnauthenticatedError();
  }
}
