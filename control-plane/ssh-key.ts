// Validation of an OpenSSH public key (one authorized_keys line without options):
// `<type> <base64 body> [comment]`. Beyond SPEC's rules (recognised type, one line, under 8192
// characters) the body must be canonical base64 whose embedded type string equals the declared
// type, and the comment must be printable. The key is stored as data and never interpolated
// into a shell command.

export const SSH_KEY_MAX_LENGTH = 8192;

/** Key types accepted: SPEC's ssh-ed25519, ssh-rsa, ecdsa-sha2-*, ssh-dss and the sk- hardware variants. */
export const SSH_KEY_TYPES: ReadonlySet<string> = new Set([
  'ssh-ed25519',
  'ssh-rsa',
  'ssh-dss',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'sk-ssh-ed25519@openssh.com',
  'sk-ecdsa-sha2-nistp256@openssh.com',
]);

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
// Printable ASCII plus any non-control Unicode: no control characters in the comment.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

export type SshKeyCheck = { ok: true; key: string } | { ok: false; reason: string };

/** Checks `input`; on success `key` is the normalised line (a trailing newline removed). */
export function checkSshPublicKey(input: string): SshKeyCheck {
  // A key pasted from a .pub file ends with one newline: tolerate exactly that.
  const line = input.endsWith('\r\n') ? input.slice(0, -2) : input.endsWith('\n') ? input.slice(0, -1) : input;
  if (line.length >= SSH_KEY_MAX_LENGTH) return { ok: false, reason: `must be under ${SSH_KEY_MAX_LENGTH} characters` };
  if (/[\r\n]/.test(line)) return { ok: false, reason: 'must be a single line' };
  if (CONTROL.test(line.replace(/\t/g, ' '))) return { ok: false, reason: 'must not contain control characters' };
  const m = /^(\S+)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(line);
  if (!m) return { ok: false, reason: 'expected "<type> <base64 key> [comment]"' };
  const [, type, body] = m as unknown as [string, string, string];
  if (!SSH_KEY_TYPES.has(type)) {
    return { ok: false, reason: 'must begin with a recognised key type (ssh-ed25519, ssh-rsa, ecdsa-sha2-*, ssh-dss, sk-*)' };
  }
  if (!BASE64.test(body) || body.length % 4 !== 0) return { ok: false, reason: 'key body is not valid base64' };
  const raw = Buffer.from(body, 'base64');
  if (raw.length < 4) return { ok: false, reason: 'key body is too short' };
  const typeLen = raw.readUInt32BE(0);
  if (typeLen > raw.length - 4 || raw.subarray(4, 4 + typeLen).toString('latin1') !== type) {
    return { ok: false, reason: `key body does not match its declared type ${type}` };
  }
  if (raw.length === 4 + typeLen) return { ok: false, reason: 'key body holds no key material' };
  return { ok: true, key: line.trimEnd() };
}
