// A small SMTP client (RFC 5321) for the platform's few mails (e-mail verification links): one
// connection per message, EHLO, MAIL FROM, RCPT TO, DATA, QUIT. Plain TCP without AUTH or TLS:
// point RC_SMTP_URL at a local relay (postfix, an MTA sidecar) that holds the credentials and
// speaks TLS onward. Why not a dependency: this is about a hundred lines and sends one kind of
// message; nodemailer would add a large surface for it.
import { connect, type Socket } from 'node:net';
import { RcError } from '../../lib/errors.js';

export interface MailMessage {
  from: string;
  to: string;
  subject: string;
  /** Plain text (UTF-8); lines are dot-stuffed and sent with CRLF. */
  text: string;
}

export class SmtpError extends RcError {
  constructor(message: string) {
    super('RC_ERR_SMTP', message, 502);
  }
}

/** No CR or LF in a header field or an envelope address: a mail must not carry extra headers or commands. */
function oneLine(value: string, what: string): string {
  if (/[\r\n]/.test(value)) throw new SmtpError(`${what} must be one line`);
  return value;
}

/** Reads SMTP replies (possibly multi-line: `250-...` lines, then `250 ...`) from a socket. */
class ReplyReader {
  private buffer = '';
  private lines: string[] = [];
  private waiting: { resolve: (r: { code: number; text: string }) => void; reject: (e: Error) => void } | undefined;
  private failure: Error | undefined;

  constructor(socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.buffer += chunk;
      let nl: number;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        this.lines.push(this.buffer.slice(0, nl).replace(/\r$/, ''));
        this.buffer = this.buffer.slice(nl + 1);
      }
      this.deliver();
    });
    const fail = (err: Error) => {
      this.failure ??= err;
      this.deliver();
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new SmtpError('The SMTP server closed the connection')));
  }

  next(): Promise<{ code: number; text: string }> {
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
      this.deliver();
    });
  }

  private deliver(): void {
    if (!this.waiting) return;
    const last = this.lines.findIndex((l) => /^\d{3}( |$)/.test(l));
    if (last >= 0) {
      const reply = this.lines.splice(0, last + 1);
      const w = this.waiting;
      this.waiting = undefined;
      w.resolve({ code: Number(reply[last]!.slice(0, 3)), text: reply.map((l) => l.slice(4)).join('\n') });
    } else if (this.failure) {
      const w = this.waiting;
      this.waiting = undefined;
      w.reject(this.failure);
    }
  }
}

/** The message as sent after DATA: headers, a blank line, the dot-stuffed body, the final dot. */
export function formatMessage(m: MailMessage, date = new Date()): string {
  const subject = /^[\x20-\x7e]*$/.test(m.subject) ? m.subject : `=?UTF-8?B?${Buffer.from(m.subject).toString('base64')}?=`;
  const headers = [
    `From: <${oneLine(m.from, 'From')}>`,
    `To: <${oneLine(m.to, 'To')}>`,
    `Subject: ${oneLine(subject, 'Subject')}`,
    `Date: ${date.toUTCString()}`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    'Content-Transfer-Encoding: 8bit',
  ];
  const body = m.text.split(/\r?\n/).map((l) => (l.startsWith('.') ? `.${l}` : l));
  return `${headers.join('\r\n')}\r\n\r\n${body.join('\r\n')}\r\n.\r\n`;
}

/** Sends one message through the SMTP server at `url` (`smtp://host[:port]`, port 25 by default). */
export async function sendSmtp(url: string, m: MailMessage, timeoutMs = 15_000): Promise<void> {
  const u = new URL(url);
  if (u.protocol !== 'smtp:') throw new SmtpError(`Not an smtp:// URL: ${url}`);
  const data = formatMessage(m);
  const socket = connect(Number(u.port || 25), u.hostname.replace(/^\[|\]$/g, ''));
  socket.setTimeout(timeoutMs, () => socket.destroy(new SmtpError(`The SMTP server did not answer within ${timeoutMs} ms`)));
  const replies = new ReplyReader(socket);
  const expect = async (what: string, ok: (code: number) => boolean) => {
    const r = await replies.next();
    if (!ok(r.code)) throw new SmtpError(`SMTP ${what}: ${r.code} ${r.text}`);
  };
  const command = async (line: string, what: string, ok: (code: number) => boolean) => {
    socket.write(`${line}\r\n`);
    await expect(what, ok);
  };
  try {
    await expect('greeting', (c) => c === 220);
    await command('EHLO rc-platform', 'EHLO', (c) => c === 250);
    await command(`MAIL FROM:<${oneLine(m.from, 'From')}>`, 'MAIL FROM', (c) => c === 250);
    await command(`RCPT TO:<${oneLine(m.to, 'To')}>`, 'RCPT TO', (c) => c === 250 || c === 251);
    await command('DATA', 'DATA', (c) => c === 354);
    socket.write(data);
    await expect('message', (c) => c === 250);
    socket.write('QUIT\r\n');
    await replies.next().catch(() => undefined); // 221, or the server just closes
  } finally {
    socket.destroy();
  }
}
