// Thinking-block signatures: HMAC-SHA256 of the thinking text under a gateway secret, base64.
// A thinking block sent back in a later request's history is checked against it, so a client
// cannot pass off made-up reasoning as the model's. Every gateway behind one address must share
// the secret (setting messagesThinkingSecret); unset, each process draws a random one.
import { createHmac, randomBytes, timingSafeEqual, type Hmac } from 'node:crypto';

export class ThinkingSigner {
  private readonly secret: Buffer;

  /** `secret` empty or undefined: a random per-process secret. */
  constructor(secret?: string) {
    this.secret = secret ? Buffer.from(secret, 'utf8') : randomBytes(32);
  }

  /** The signature of a whole thinking text. */
  sign(text: string): string {
    return createHmac('sha256', this.secret).update(text, 'utf8').digest('base64');
  }

  /** An incremental signer for a text that arrives in fragments (streaming). */
  begin(): Hmac {
    return createHmac('sha256', this.secret);
  }

  /** True when `signature` is the signature of `text` (constant-time). */
  verify(text: string, signature: string): boolean {
    const expected = createHmac('sha256', this.secret).update(text, 'utf8').digest();
    const given = Buffer.from(signature, 'base64');
    return given.length === expected.length && timingSafeEqual(given, expected);
  }
}
