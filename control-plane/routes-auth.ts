// Sign-in (SPEC: not shown; our design): e-mail + password (scrypt). A session is a random
// token in an HttpOnly, SameSite=Lax cookie (Secure behind TLS); writes made with that cookie
// need the session's CSRF token in the x-csrf-token header (returned by sign-up, login and
// GET /api/auth/session).
import { z } from 'zod';
import { hashKey } from '../lib/keys.js';
import { clearSessionCookie, sessionCookie, type Caller } from './auth.js';
import type { ApiDeps } from './deps.js';
import { forbidden, unauthorized } from './errors.js';
import { dummyHash, hashPassword, verifyPassword } from './passwords.js';
import { route, type Reply, type Route } from './router.js';
import { profile } from './views.js';

const credentials = z.strictObject({
  email: z.string().trim().toLowerCase().max(254).pipe(z.email('must be an e-mail address')),
  password: z.string().min(8, 'password must have at least 8 characters').max(256),
});

export const LOGIN_FAILED = 'Invalid e-mail or password';

function secure(deps: ApiDeps, forwardedProto: string): boolean {
  const mode = deps.settings.cookieSecure;
  return mode === 'always' || (mode === 'auto' && forwardedProto.trim().toLowerCase() === 'https');
}

function signedIn(deps: ApiDeps, accountId: number, forwardedProto: string, status = 200): Reply {
  const ttlMs = deps.settings.sessionTtlHours * 3_600_000;
  const s = deps.store.sessions.create(accountId, ttlMs);
  // The gateway accepts the session on the shared model routes (unverified accounts have no key).
  void deps.bus
    .publish({ type: 'session.started', tokenHash: hashKey(s.token), csrfHash: hashKey(s.csrfToken), accountId, expiresAt: s.expiresAt })
    .catch((err: unknown) => deps.logger.warn('bus publish failed', { err }));
  return {
    status,
    body: { account: profile(deps.store, deps.store.accounts.byId(accountId)!), csrf_token: s.csrfToken, expires_at: new Date(s.expiresAt).toISOString() },
    cookies: [sessionCookie(s.token, Math.floor(ttlMs / 1000), secure(deps, forwardedProto))],
  };
}

export function authRoutes(deps: ApiDeps): Route[] {
  const { store } = deps;
  return [
    route({
      method: 'post', path: '/api/auth/signup', access: 'none', body: credentials,
      async handle({ body, forwardedProto }) {
        if (deps.settings.signup !== 'open') throw forbidden('Sign-up is closed', 'signup_closed');
        const passwordHash = await hashPassword(body.password);
        const a = store.accounts.create({ email: body.email, provider: 'password', passwordHash }); // starts unverified
        return signedIn(deps, a.id, forwardedProto, 201);
      },
    }),
    route({
      method: 'post', path: '/api/auth/login', access: 'none', body: credentials,
      async handle({ body, forwardedProto }) {
        const found = store.accounts.withPassword(body.email);
        // Hash even when the account does not exist, so timing does not reveal which e-mails exist.
        const ok = await verifyPassword(body.password, found?.passwordHash ?? (await dummyHash()));
        if (!found || !found.passwordHash || !ok) throw unauthorized(LOGIN_FAILED);
        return signedIn(deps, found.account.id, forwardedProto);
      },
    }),
    route({
      method: 'post', path: '/api/auth/logout', access: 'required',
      handle({ forwardedProto }, caller: Caller) {
        if (caller.session) {
          store.sessions.delete(caller.session.token);
          void deps.bus.publish({ type: 'session.ended', tokenHash: hashKey(caller.session.token) }).catch((err: unknown) => deps.logger.warn('bus publish failed', { err }));
        }
        return { body: { success: true }, cookies: [clearSessionCookie(secure(deps, forwardedProto))] };
      },
    }),
    route({
      method: 'get', path: '/api/auth/session', access: 'required',
      handle(_req, caller: Caller) {
        return {
          body: {
            account: profile(store, caller.account),
            via: caller.via,
            csrf_token: caller.session?.csrfToken ?? null,
            expires_at: caller.session ? new Date(caller.session.expiresAt).toISOString() : null,
          },
        };
      },
    }),
  ];
}
