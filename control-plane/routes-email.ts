// E-mail verification routes (auth/email-verification.ts): the link a sign-up mails, and asking
// for a new one.
import { z } from 'zod';
import type { ApiDeps } from './deps.js';
import { VERIFY_PATH, type EmailVerifications } from './auth/email-verification.js';
import type { AttemptLimits } from './auth/attempt-limits.js';
import type { MailSender } from './auth/mail.js';
import { API_ERRORS } from './errors.js';
import { route, type Route } from './router.js';

export const RESEND_ANSWER = 'If this address is waiting for verification, a new link is on its way';

/** The e-mail that carries a verification link. */
export function verificationMail(from: string, to: string, link: string) {
  return {
    from,
    to,
    subject: 'Verify your e-mail address',
    text: `Open this link to verify your e-mail address and finish signing up:\n\n${link}\n\nIt is valid for 24 hours. If you did not sign up, ignore this mail.\n`,
  };
}

/** Issues a link for the account and mails it; never throws (a failed send is logged; the user can ask again). */
export function linkSender(deps: ApiDeps, verifications: EmailVerifications, mail: MailSender, apiBase: () => string) {
  return async (accountId: number, email: string): Promise<void> => {
    try {
      const token = await verifications.issue(accountId);
      const link = `${apiBase().replace(/\/+$/, '')}${VERIFY_PATH}?token=${token}`;
      mail
        .send(verificationMail(deps.settings.mailFrom, email, link))
        .catch((err: unknown) => deps.logger.warn('verification mail failed', { accountId, err }));
    } catch (err) {
      deps.logger.warn('verification link failed', { accountId, err });
    }
  };
}

/** The mail to the owner of an existing address that someone signed up with (verification on). */
export function accountExistsMail(from: string, to: string, signIn: string) {
  return {
    from,
    to,
    subject: 'You already have an account',
    text: `Someone (maybe you) tried to create an account with this e-mail address, which already has one. Sign in instead:\n\n${signIn}\n\nIf you forgot your password, ask the platform's operator. If it was not you, ignore this mail: nothing was changed.\n`,
  };
}

/**
 * What a sign-up with an existing address sends (routes-auth.ts notifyExisting): a new link while
 * the account waits for verification, else the account-exists note; never throws.
 */
export function existingAccountNotifier(
  deps: ApiDeps,
  verifications: EmailVerifications,
  mail: MailSender,
  sendLink: (accountId: number, email: string) => Promise<void>,
  apiBase: () => string,
) {
  return async (accountId: number, email: string): Promise<void> => {
    const verified = await verifications.isVerified(accountId).catch((err: unknown) => {
      deps.logger.warn('verification state unreadable', { accountId, err });
      return true;
    });
    if (!verified) return sendLink(accountId, email);
    const signIn = `${apiBase().replace(/\/+$/, '')}/signin`;
    mail
      .send(accountExistsMail(deps.settings.mailFrom, email, signIn))
      .catch((err: unknown) => deps.logger.warn('account-exists mail failed', { accountId, err }));
  };
}

/** The mails sign-up and the verification routes send: a link, and the note to an existing address's owner. */
export function mailHooks(deps: ApiDeps, verifications: EmailVerifications, mail: MailSender, apiBase: () => string) {
  const sendLink = linkSender(deps, verifications, mail, apiBase);
  return { sendLink, notifyExisting: existingAccountNotifier(deps, verifications, mail, sendLink, apiBase) };
}

export function emailRoutes(
  deps: ApiDeps,
  verifications: EmailVerifications,
  sendLink: (accountId: number, email: string) => Promise<void>,
  /** Its takeSignUp: a resend takes from the sign-up bucket of the address (each can send a mail). */
  limits: AttemptLimits,
): Route[] {
  return [
    route({
      // The link from the mail, opened in a browser: a GET, single use, no sign-in.
      method: 'get',
      path: '/api/auth/verify-email',
      access: 'none', // VERIFY_PATH
      summary: 'Verify an e-mail address with the single-use link a sign-up mailed',
      query: z.object({ token: z.string().optional() }),
      async handle({ query }) {
        const token = query.token ?? '';
        const accountId = token.length > 0 && token.length <= 128 ? await verifications.consume(token) : undefined;
        if (accountId === undefined) throw API_ERRORS.verificationLinkInvalid();
        return { body: { email_verified: true, email: (await deps.store.accounts.byId(accountId))!.email } };
      },
    }),
    route({
      method: 'post',
      path: '/api/auth/verify-email/resend',
      access: 'none',
      sameOriginJson: true,
      summary: 'Mail a new verification link (the same answer for every address)',
      body: z.strictObject({ email: z.string().trim().toLowerCase().max(254).pipe(z.email('must be an e-mail address')) }),
      async handle({ body, clientAddress }) {
        const wait = await limits.takeSignUp(clientAddress);
        if (wait > 0) throw API_ERRORS.signupRateLimited(wait, 'requests');
        const a = await deps.store.accounts.byEmail(body.email);
        // The same answer whether or not the address exists or waits: nothing is learnt about accounts.
        if (a && deps.settings.emailVerification === 'required' && !(await verifications.isVerified(a.id))) await sendLink(a.id, a.email);
        return { status: 202, body: { detail: RESEND_ANSWER } };
      },
    }),
  ];
}
