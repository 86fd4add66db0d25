// E-mail verification (issue 14; SPEC's 409 "e-mail verification required first") against a real
// SMTP listener made here: sign-up mails a link and does not sign in, sign-in answers 409 with
// its code until the link is opened, the link works once.
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { formatMessage } from '../../control-plane/auth/smtp.js';
import { createLogger } from '../../lib/log.js';
import { waitFor } from '../helpers.js';
import { sessionCookieOf, startPlatform } from './platform.js';

interface Mail {
  from: string;
  to: string;
  data: string;
}

/** A minimal SMTP server: records each message's envelope and data. */
async function startSmtp(t: TestContext): Promise<{ url: string; mails: Mail[] }> {
  const mails: Mail[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.setEncoding('utf8');
    const current: Mail = { from: '', to: '', data: '' };
    let inData = false;
    let buffer = '';
    socket.write('220 test-smtp ready\r\n');
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      while (true) {
        if (inData) {
          const end = buffer.indexOf('\r\n.\r\n');
          if (end < 0) return;
          current.data = buffer.slice(0, end);
          buffer = buffer.slice(end + 5);
          inData = false;
          mails.push({ ...current });
          socket.write('250 queued\r\n');
          continue;
        }
        const nl = buffer.indexOf('\r\n');
        if (nl < 0) return;
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 2);
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'EHLO') socket.write('250-test-smtp\r\n250 8BITMIME\r\n');
        else if (verb === 'MAIL') {
          current.from = line;
          socket.write('250 ok\r\n');
        } else if (verb === 'RCPT') {
          current.to = line;
          socket.write('250 ok\r\n');
        } else if (verb === 'DATA') {
          inData = true;
          socket.write('354 go on\r\n');
        } else if (verb === 'QUIT') {
          socket.end('221 bye\r\n');
          return;
        } else socket.write('500 what\r\n');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return { url: `smtp://127.0.0.1:${(server.address() as { port: number }).port}`, mails };
}

const PASSWORD = 'correct horse battery';

test('e-mail verification: the link is mailed over SMTP; 409 until it is opened; single use', async (t) => {
  const smtp = await startSmtp(t);
  const p = await startPlatform({ settings: { emailVerification: 'required', smtpUrl: smtp.url, mailFrom: 'noreply@platform.test' } });
  t.after(() => p.close());

  const signup = await p.call('POST', '/api/auth/signup', { body: { email: 'new@example.com', password: PASSWORD } });
  assert.equal(signup.status, 201, JSON.stringify(signup.body));
  assert.equal(signup.body.email_verification, 'sent');
  assert.equal(signup.headers['set-cookie'], undefined, 'no session before the address is verified');
  assert.equal(signup.body.csrf_token, undefined);

  const early = await p.call('POST', '/api/auth/login', { body: { email: 'new@example.com', password: PASSWORD } });
  assert.equal(early.status, 409);
  assert.equal(early.body.detail.code, 'email_verification_required');
  assert.equal(early.headers['set-cookie'], undefined);
  // A wrong password is still 401: the 409 says nothing to someone who does not know the password.
  assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'new@example.com', password: 'wrong password' } })).status, 401);

  const mail = await waitFor(() => smtp.mails[0]);
  assert.equal(mail.from, 'MAIL FROM:<noreply@platform.test>');
  assert.equal(mail.to, 'RCPT TO:<new@example.com>');
  assert.match(mail.data, /^Subject: Verify your e-mail address$/m);
  const link = /(http:\/\/\S+\/api\/auth\/verify-email\?token=[A-Za-z0-9_-]+)/.exec(mail.data)?.[1];
  assert.ok(link && link.startsWith(p.cp.url), mail.data);

  // The operator's review queue says whether the address was confirmed (not yet).
  await p.account('op@example.com', { verified: true, operator: true, password: PASSWORD });
  const opLogin = await p.call('POST', '/api/auth/login', { body: { email: 'op@example.com', password: PASSWORD } });
  assert.equal(opLogin.status, 200, JSON.stringify(opLogin.body));
  const asOperator = { cookie: sessionCookieOf(opLogin), csrf: opLogin.body.csrf_token as string };
  const confirmed = async () =>
    ((await p.call('GET', '/api/operator/review', asOperator)).body.accounts as { email: string; email_verified: boolean | null }[]).find(
      (a) => a.email === 'new@example.com',
    )?.email_verified;
  assert.equal(await confirmed(), false);

  const path = new URL(link).pathname + new URL(link).search;
  assert.equal((await p.call('GET', '/api/auth/verify-email?token=forged')).status, 400);
  assert.equal((await p.call('GET', '/api/auth/verify-email')).status, 400);
  const opened = await p.call('GET', path);
  assert.equal(opened.status, 200);
  assert.deepEqual(opened.body, { email_verified: true, email: 'new@example.com' });
  assert.equal(await confirmed(), true);
  assert.equal((await p.call('GET', path)).status, 400, 'a link works once');

  const login = await p.call('POST', '/api/auth/login', { body: { email: 'new@example.com', password: PASSWORD } });
  assert.equal(login.status, 200);
  assert.equal(login.body.account.verified, false, 'a verified e-mail is not a cleared review');

  // Asking for a new link: the same answer for every address; a mail only where one is waited for.
  await p.call('POST', '/api/auth/signup', { body: { email: 'second@example.com', password: PASSWORD } });
  await waitFor(() => smtp.mails.length === 2);
  for (const email of ['new@example.com', 'nobody@example.com', 'second@example.com']) {
    const r = await p.call('POST', '/api/auth/verify-email/resend', { body: { email } });
    assert.equal(r.status, 202);
  }
  await waitFor(() => smtp.mails.length === 3);
  assert.equal(smtp.mails[2]!.to, 'RCPT TO:<second@example.com>');
  assert.equal(
    (await p.call('POST', '/api/auth/verify-email/resend', { raw: '{"email":"second@example.com"}', headers: { 'content-type': 'text/plain' } })).status,
    415,
  );

  // Accounts the operator creates need no verification.
  await p.account('ops@example.com', { password: PASSWORD });
  assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'ops@example.com', password: PASSWORD } })).status, 200);
});

test('SMTP message format: dot-stuffing, no header injection, encoded non-ASCII subject', () => {
  const text = formatMessage({ from: 'a@x.test', to: 'b@y.test', subject: 'Vérifier', text: 'line\n.starts with a dot\n.' }, new Date(0));
  assert.match(text, /\r\n\.\.starts with a dot\r\n\.\.\r\n\.\r\n$/);
  assert.match(text, /^Subject: =\?UTF-8\?B\?/m);
  assert.throws(() => formatMessage({ from: 'a@x.test', to: 'b@y.test\r\nBcc: c@z.test', subject: 's', text: '' }), /one line/);
});

test('without RC_SMTP_URL the link is logged (the default mail sender), and it works', async (t) => {
  const lines: string[] = [];
  const p = await startPlatform({ settings: { emailVerification: 'required' }, logger: createLogger('info', {}, (l) => lines.push(l)) });
  t.after(() => p.close());
  assert.equal((await p.call('POST', '/api/auth/signup', { body: { email: 'logged@example.com', password: PASSWORD } })).status, 201);
  const logged = await waitFor(() => lines.map((l) => JSON.parse(l) as { to?: string; text?: string }).find((e) => e.to === 'logged@example.com'));
  const link = /(http:\/\/\S+)/.exec(logged.text!)![1]!;
  assert.equal((await p.call('GET', new URL(link).pathname + new URL(link).search)).status, 200);
  assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'logged@example.com', password: PASSWORD } })).status, 200);
});

test('sign-up does not tell whether an address has an account: the same answer, the mail says the rest', async (t) => {
  const smtp = await startSmtp(t);
  const p = await startPlatform({ settings: { emailVerification: 'required', smtpUrl: smtp.url, mailFrom: 'noreply@platform.test' } });
  t.after(() => p.close());
  await p.account('known@example.com', { password: PASSWORD }); // an account (made by the operator: no verification needed)
  const waiting = await p.call('POST', '/api/auth/signup', { body: { email: 'waiting@example.com', password: PASSWORD } });
  await waitFor(() => smtp.mails.length === 1);

  const answers = [];
  for (const email of ['fresh@example.com', 'known@example.com', 'waiting@example.com'])
    answers.push(await p.call('POST', '/api/auth/signup', { body: { email, password: 'another password' } }));
  for (const r of [waiting, ...answers]) {
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.deepEqual(r.body, answers[0]!.body, 'the same body for a new, an existing and a waiting address');
    assert.equal(r.headers['set-cookie'], undefined);
  }
  assert.deepEqual(Object.keys(answers[0]!.body).sort(), ['detail', 'email_verification']);

  // The owners read the rest: a first link for the new address, the note for the existing
  // account, a new link for the one waiting for verification.
  await waitFor(() => smtp.mails.length === 4);
  const to = (address: string) => smtp.mails.slice(1).filter((m) => m.to === `RCPT TO:<${address}>`);
  assert.match(to('fresh@example.com')[0]!.data, /^Subject: Verify your e-mail address$/m);
  assert.match(to('known@example.com')[0]!.data, /^Subject: You already have an account$/m);
  assert.match(to('known@example.com')[0]!.data, /\/signin/);
  assert.match(to('waiting@example.com')[0]!.data, /^Subject: Verify your e-mail address$/m);
  // Nothing changed for the existing account: its own password still signs in, the other does not.
  assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'known@example.com', password: PASSWORD } })).status, 200);
  assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'known@example.com', password: 'another password' } })).status, 401);
});

test('with e-mail verification off, sign-up of an existing address is 409 email_taken (documented: it cannot sign in as a new one would)', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  assert.equal((await p.call('POST', '/api/auth/signup', { body: { email: 'a@example.com', password: PASSWORD } })).status, 201);
  const again = await p.call('POST', '/api/auth/signup', { body: { email: 'a@example.com', password: PASSWORD } });
  assert.equal(again.status, 409);
  assert.equal(again.body.detail, 'An account with this e-mail already exists');
});
