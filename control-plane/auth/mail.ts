// Where the platform's mails go: to the log (the default: an operator without a mail server
// still sees each verification link) or to an SMTP server (RC_SMTP_URL, smtp.ts).
import type { Logger } from '../../lib/log.js';
import { sendSmtp, type MailMessage } from './smtp.js';

export interface MailSender {
  send(m: MailMessage): Promise<void>;
}

/** Logs each message (at info level: the verification link must reach the operator). */
export function logMailSender(logger: Logger): MailSender {
  return {
    async send(m) {
      logger.info('mail (RC_SMTP_URL is not set, so it is logged instead of sent)', { to: m.to, subject: m.subject, text: m.text });
    },
  };
}

/** An SMTP sender when `smtpUrl` is set, else the log. */
export function mailSender(smtpUrl: string, logger: Logger): MailSender {
  return smtpUrl ? { send: (m) => sendSmtp(smtpUrl, m) } : logMailSender(logger);
}
