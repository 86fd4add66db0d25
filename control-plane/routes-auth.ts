// Sign-in (SPEC: not shown; our design): e-mail + password (scrypt). A session is a random
// token in an HttpOnly, SameSite=Lax cookie (Secure behind TLS); writes made with that cookie
// need the session's CSRF token in the x-csrf-token header (returned by sign-up, login and
// GET /api/auth/session).
import { z } from 'zod';
import { hashKey } from '../lib/keys.js';
import { csrfTokenFor } from './accounts.js';
import { expiredSessionCookies, sessionCookie, type Caller } from './auth.js';
import { secureCookies } from '../lib/session-cookie.js';
import type { ApiDeps } from './deps.js';
import { ApiError } from './api-error.js';
import { API_ERRORS } from './errors.js';
import type { AttemptLimits } from './auth/attempt-limits.js';
import type { EmailVerifications } from './auth/email-verification.js';
import { dummyHash, hashPassword, verifyPassword } from './passwords.js';
import { effectiveOverrides, hasSharedModelAccess } from './model-access.js';
import { route, type Reply, type Route } from './router.js';
import { profile } from './views.js';

const credentials = z.strictObject({
  email: z.string().trim().toLowerCase().max(254).pipe(z.email('must be an e-mail address')),
  password: z.string().min(8, 'password must have at least 8 characters').max(256),
});

function secure(deps: ApiDeps, forwardedProto: string): boolean {
  return secureCookies(deps.settings.cookieSecure, forwardedProto);
}

/** The paths a session cookie may sit on for the API's routes (auth.ts sessionCookiePaths), known once every route is. */
export type CookiePaths = () => readonly string[];

async function signedIn(deps: ApiDeps, cookiePaths: CookiePaths, accountId: number, forwardedProto: string, status = 200): Promise<Reply> {
  const ttlMs = deps.settings.sessionTtlHours * 3_600_000;
  const s = await deps.store.sessions.create(accountId, ttlMs);
  const account = (await deps.store.accounts.byId(accountId))!;
  // The gateway accepts the session on the shared model routes (unverified accounts have no key),
  // unless accounts under review have no shared model access (model-access.ts).
  const modelAccess = hasSharedModelAccess(account.verified, deps.settings);
  // Awaited: the answer goes out once the gateway(s) of this process know the session (the bus's
  // publish resolves when its subscribers here heard it, Redis included), so a session used the
  // moment sign-in answers is not refused (issue 44: 401 invalid_session, 1 in 87).
  await deps.bus
    .publish({
      type: 'session.started',
      tokenHash: hashKey(s.token),
      csrfHash: s.csrfHash,
      accountId,
      expiresAt: s.expiresAt,
      ...(modelAccess ? {} : { modelAccess: false }),
    })
    .catch((err: unknown) => deps.logger.warn('bus publish failed', { err }));
  return {
    status,
    body: {
      account: await profile(deps.store, account),
      operator: account.isOperator,
      csrf_token: s.csrfToken,
      expires_at: new Date(s.expiresAt).toISOString(),
    },
    // Any other session cookie the browser holds for the API's paths (tossed in by a page on another
    // port of this host, which leaves the user with no session) is expired beside the new one.
    // The new cookie comes first (clients that read one Set-Cookie read it).
    cookies: [
      sessionCookie(s.token, Math.floor(ttlMs / 1000), secure(deps, forwardedProto)),
      ...expiredSessionCookies(secure(deps, forwardedProto), cookiePaths(), true),
    ],
  };
}

/** E-mail verification as sign-up and sign-in use it (routes-email.ts). */
export interface EmailVerificationHooks {
  verifications: EmailVerifications;
  /** Sends a new link to the account (failures are logged, not thrown: the user can ask again). */
  sendLink(accountId: number, email: string): Promise<void>;
  /**
   * Someone signed up with the address of an existing account: a new link while it waits for
   * verification, else a note that the account exists (never throws). Default: sendLink when waiting.
   */
  notifyExisting(accountId: number, email: string): Promise<void>;
}

/**
 * The answer of a sign-up while e-mail verification is on, the same for a new address and an
 * existing one (issue 44): nothing about the account, whose owner reads the rest in the mail.
 */
export const SIGNUP_MAILED = {
  email_verification: 'sent',
  detail: 'Check your mail: a link to finish signing up is on its way (if you already have an account, the mail says so)',
} as const;

/** What the sign-in routes share: the API's dependencies, e-mail verification, the limits and the cookie paths. */
interface AuthContext {
  deps: ApiDeps;
  email: EmailVerificationHooks;
  /** RC_EMAIL_VERIFICATION=required: sign-up mails a link instead of signing in. */
  verifyEmail: boolean;
  /** Sign-in and sign-up attempt limits (in memory or shared in Redis: auth/attempt-limits.ts). */
  attempts: AttemptLimits;
  cookiePaths: CookiePaths;
}

export function authRoutes(deps: ApiDeps, email: EmailVerificationHooks, attempts: AttemptLimits, cookiePaths: CookiePaths = () => ['/']): Route[] {
  const ctx: AuthContext = {
    deps,
    email,
    verifyEmail: deps.settings.emailVerification === 'required',
    attempts,
    cookiePaths,
  };
  return [signUpRoute(ctx), signInRoute(ctx), signOutRoute(ctx), sessionRoute(ctx)];
}

function signUpRoute({ deps, email, verifyEmail, attempts, cookiePaths }: AuthContext): Route {
  const { store } = deps;
  return route({
    method: 'post',
    path: '/api/auth/signup',
    summary: 'Create an account (unverified) and sign in: session cookie and CSRF token',
    access: 'none',
    body: credentials,
    sameOriginJson: true,
    async handle({ body, forwardedProto, clientAddress }) {
      if (deps.settings.signup !== 'open') throw API_ERRORS.signupClosed();
      // Each open sign-up is an account with its own daily model cap: one address cannot mint many.
      const wait = await attempts.takeSignUp(clientAddress);
      if (wait > 0) throw API_ERRORS.signupRateLimited(wait);
      // Hashed for every sign-up, new address or not: the answer's time says nothing either.
      const passwordHash = await hashPassword(body.password);
      const existing = await store.accounts.byEmail(body.email);
      if (existing) {
        // With verification on, an existing address gets the new address's answer; its owner learns
        // the rest by mail (a new link while it waits, else a note that the account exists). With it
        // off, a new address is signed in at once, which an existing one cannot be: the answer has to
        // differ (README "Sign-up and existing addresses"), bounded by the per-address sign-up limit.
        if (!verifyEmail) throw API_ERRORS.emailTaken();
        await email.notifyExisting(existing.id, existing.email);
        return { status: 201, body: SIGNUP_MAILED };
      }
      let a;
      try {
        a = await store.transaction(async (tx) => {
          const created = await tx.accounts.create({ email: body.email, provider: 'password', passwordHash }); // starts unverified
          if (verifyEmail) await tx.emailVerifications.markUnverified(created.id);
          return created;
        });
      } catch (err) {
        // Created by a concurrent sign-up since the lookup: the same answer as above.
        if (!verifyEmail || !(err instanceof ApiError) || err.code !== 'RC_ERR_EMAIL_TAKEN') throw err;
        return { status: 201, body: SIGNUP_MAILED };
      }
      // Its daily cap is the one of accounts under review; the gateway hears it before the session.
      const limits = effectiveOverrides(null, false, deps.settings);
      if (limits)
        await deps.bus.publish({ type: 'account.changed', accountId: a.id, limits }).catch((err: unknown) => deps.logger.warn('bus publish failed', { err }));
      if (verifyEmail) {
        // No session until the address is verified: the link comes by mail.
        await email.sendLink(a.id, a.email);
        return { status: 201, body: SIGNUP_MAILED };
      }
      return signedIn(deps, cookiePaths, a.id, forwardedProto, 201);
    },
  });
}

function signInRoute({ deps, email, verifyEmail, attempts, cookiePaths }: AuthContext): Route {
  const { store } = deps;
  return route({
    method: 'post',
    path: '/api/auth/login',
    summary: 'Sign in with e-mail and password: session cookie and CSRF token',
    access: 'none',
    body: credentials,
    sameOriginJson: true,
    async handle({ body, forwardedProto, clientAddress }) {
      // Limits first: a refused attempt costs no scrypt and checks no password (auth/rate-limit.ts).
      const wait = await attempts.admitSignIn(body.email, clientAddress);
      if (wait > 0) throw API_ERRORS.loginRateLimited(wait);
      const found = await store.accounts.withPassword(body.email);
      // Hash even when the account does not exist, so timing does not reveal which e-mails exist.
      const ok = await verifyPassword(body.password, found?.passwordHash ?? (await dummyHash()));
      if (!found || !found.passwordHash || !ok) {
        // Counted before the answer: the next attempt, through any control plane, sees it.
        await attempts.signInFailed(body.email, clientAddress);
        throw API_ERRORS.loginFailed();
      }
      await attempts.signInSucceeded(body.email, clientAddress);
      if (found.account.disabled) throw API_ERRORS.accountDisabled();
      if (verifyEmail && !(await email.verifications.isVerified(found.account.id))) throw API_ERRORS.emailVerificationRequired();
      return signedIn(deps, cookiePaths, found.account.id, forwardedProto);
    },
  });
}

function signOutRoute({ deps, cookiePaths }: AuthContext): Route {
  return route({
    method: 'post',
    path: '/api/auth/logout',
    summary: 'End the browser session and clear every session cookie (also without a valid session)',
    // Optional: a browser holding two session cookies has no session, and must still be able to
    // clear them (a bad key is still 401).
    access: 'optional',
    sameOriginJson: true,
    async handle({ forwardedProto }, caller: Caller | undefined) {
      if (caller?.session) {
        await deps.store.sessions.delete(caller.session.token);
        void deps.bus
          .publish({ type: 'session.ended', tokenHash: hashKey(caller.session.token) })
          .catch((err: unknown) => deps.logger.warn('bus publish failed', { err }));
      }
      // Every path we know of, and Clear-Site-Data for the paths nobody can list (a tossed cookie's).
      return {
        body: { success: true },
        headers: { 'clear-site-data': '"cookies"' },
        cookies: expiredSessionCookies(secure(deps, forwardedProto), cookiePaths()),
      };
    },
  });
}

function sessionRoute({ deps }: AuthContext): Route {
  return route({
    method: 'get',
    path: '/api/auth/session',
    summary: "The caller, how they are signed in, and the session's CSRF token",
    access: 'required',
    async handle(_req, caller: Caller) {
      return {
        body: {
          account: await profile(deps.store, caller.account),
          via: caller.via,
          // Ours (issue 32): the console shows the operator pages to operators only; the API checks again on every operator route.
          operator: caller.account.isOperator,
          csrf_token: caller.session ? csrfTokenFor(caller.session.token) : null,
          expires_at: caller.session ? new Date(caller.session.expiresAt).toISOString() : null,
        },
      };
    },
  });
}
