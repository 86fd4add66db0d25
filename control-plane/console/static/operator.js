// The operator's pages (issue 32): review queue, accounts, coupons, hosts, instances, catalogs,
// usage and the audit log. Loaded by app.js only for operators; every action goes through the
// operator API (/api/operator/...) with the session cookie and CSRF token, like every write of the
// console. The review queue, hosts and instances follow GET /api/operator/events live.
import {
  act, alertBox, api, compact, confirmDialog, field, fmtCredits, fmtTime, go, h, hh, hourChart, MODEL_COLOURS, onLeave, page, svg,
} from '/console/app.js';
import { hostGpus } from '/console/gpus.js';

const SECTIONS = [
  ['review', 'Review'], ['accounts', 'Accounts'], ['coupons', 'Coupons'], ['hosts', 'Hosts'],
  ['instances', 'Instances'], ['catalogs', 'Catalogs'], ['usage', 'Usage'], ['audit', 'Audit log'],
];

/** The operator pages' own navigation. */
function opNav(current) {
  return h('nav', { 'aria-label': 'Operator', class: 'subnav' }, h('ul', {}, SECTIONS.map(([k, label]) =>
    h('li', {}, h('a', { href: `/operator/${k}`, 'aria-current': k === current ? 'page' : null }, label)))));
}

/** A table that becomes label/value rows on phones; `rows` are arrays of cells (text, nodes, or [text, 'num']). */
function table(caption, headers, rows, empty = 'None.') {
  if (!rows.length) return h('p', { class: 'muted' }, empty);
  const cell = (c, i) => {
    const [v, cls] = Array.isArray(c) ? c : [c, null];
    return h('td', { 'data-label': headers[i], class: cls }, v);
  };
  return h('div', { class: 'table' }, h('table', { class: 'stack' }, h('caption', { class: 'sr-only' }, caption),
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map(cell))))));
}

/** Runs an operator action (POST /api/operator/<op>). */
const operate = (op, body) => api('POST', `/api/operator/${op}`, body);

/** Follows one topic of the operator event stream; closed when the page is left. */
function follow(topic, onData, errBox) {
  const events = new EventSource('/api/operator/events');
  events.addEventListener(topic, (e) => onData(JSON.parse(e.data)));
  events.addEventListener('error', () => { if (events.readyState === EventSource.CLOSED) errBox.textContent = 'Lost the live updates; reload the page.'; });
  onLeave(() => events.close());
}

const ago = (iso) => {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min` : s < 86400 ? `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min` : `${Math.floor(s / 86400)} d`;
};
const yesNo = (b) => (b ? 'yes' : 'no');

/** A modal asking for a text (the reason of a destroy); resolves the text, or null when cancelled. */
function reasonDialog(title, text, label, confirmLabel) {
  return new Promise((resolve) => {
    const input = h('textarea', { name: 'reason', rows: '3', required: true, maxlength: '500' });
    const ok = h('button', { type: 'submit', value: 'ok', class: 'danger' }, confirmLabel);
    const dlg = h('dialog', { 'aria-labelledby': 'rdlg-title' },
      h('form', { method: 'dialog' }, h('h2', { id: 'rdlg-title' }, title), h('p', {}, text), field(label, input),
        h('div', { class: 'row' }, ok, h('button', { type: 'submit', value: 'cancel', class: 'secondary', formnovalidate: true }, 'Cancel'))));
    dlg.addEventListener('close', () => { resolve(dlg.returnValue === 'ok' ? input.value.trim() : null); dlg.remove(); });
    document.body.append(dlg);
    dlg.showModal();
  });
}

// ---- review ---------------------------------------------------------------------------------------

function reviewPage() {
  const err = alertBox();
  const done = h('p', { role: 'status' });
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  let accounts = [];
  const selected = () => [...list.querySelectorAll('input[name=pick]:checked')].map((c) => c.value);
  async function decide(op, emails, button) {
    if (op === 'account.reject' && !(await confirmDialog('Reject?', `${emails.length} account(s) will be disabled and signed out: ${emails.join(', ')}`, 'Reject', true))) return;
    await act(button, err, async () => {
      for (const email of emails) await operate(op, { email });
      done.textContent = `${op === 'account.verify' ? 'Verified' : 'Rejected'}: ${emails.join(', ')}`;
    });
  }
  function draw() {
    const rows = accounts.map((a) => [
      h('input', { type: 'checkbox', name: 'pick', value: a.email, 'aria-label': `Select ${a.email}` }),
      a.email, fmtTime(a.created_at), a.email_verified === null ? 'not checked (verification is off)' : a.email_verified ? 'confirmed' : 'not confirmed',
      h('div', { class: 'row' },
        h('button', { type: 'button', 'aria-label': `Verify ${a.email}`, onclick: (e) => decide('account.verify', [a.email], e.target) }, 'Verify'),
        h('button', { type: 'button', class: 'secondary', 'aria-label': `Reject ${a.email}`, onclick: (e) => decide('account.reject', [a.email], e.target) }, 'Reject')),
    ]);
    // Nothing to select: the bulk buttons go too.
    bulk.hidden = accounts.length === 0;
    list.replaceChildren(table('Accounts waiting for review, newest first', ['Select', 'E-mail', 'Signed up', 'E-mail address', 'Decide'], rows, 'Nobody is waiting for review.'));
  }
  const pick = (op, label, cls) => h('button', { type: 'button', class: cls, onclick: (e) => {
    const emails = selected();
    if (!emails.length) { err.textContent = 'Select accounts first.'; return; }
    decide(op, emails, e.target);
  } }, label);
  const bulk = h('div', { class: 'row', hidden: true }, pick('account.verify', 'Verify selected'), pick('account.reject', 'Reject selected', 'secondary'));
  page('Review queue', opNav('review'), err, done, bulk, list);
  follow('review', (d) => { accounts = d.accounts; draw(); }, err);
}

// ---- accounts -------------------------------------------------------------------------------------

async function accountsPage() {
  const err = alertBox();
  const q = h('input', { type: 'search', name: 'q', autocomplete: 'off', value: new URLSearchParams(location.search).get('q') || '' });
  const results = h('div', {});
  async function search() {
    const { accounts } = await api('GET', `/api/operator/accounts?q=${encodeURIComponent(q.value.trim())}`);
    results.replaceChildren(table('Accounts', ['E-mail', 'Balance', 'Verified', 'Flags', 'Instance'], accounts.map((a) => [
      h('a', { href: `/operator/accounts/${a.id}` }, a.email), [fmtCredits(a.credits), 'num'], yesNo(a.verified),
      [a.is_operator && 'operator', a.is_editor && 'editor', a.disabled && 'disabled'].filter(Boolean).join(', ') || '—',
      a.instance ? `${a.instance.state} on ${a.instance.host || 'queue'}` : '—',
    ]), 'No account matches.'));
  }
  const submit = h('button', { type: 'submit' }, 'Search');
  page('Accounts', opNav('accounts'), err,
    h('form', { class: 'card row', role: 'search', onsubmit: (e) => { e.preventDefault(); act(submit, err, search); } }, field('E-mail contains', q), submit),
    results);
  await search();
}

/** The forms of one account: grant credits, limits, key, flags. */
function accountActions(a, err, reload) {
  const email = a.email;
  const run = (op, body, msg) => (e) => act(e.target, err, async () => { await operate(op, { email, ...body }); await reload(msg); });
  const credits = h('input', { type: 'number', name: 'credits', step: 'any', required: true, inputmode: 'decimal' });
  const reason = h('input', { name: 'reason', maxlength: '500', required: true });
  const grant = h('button', { type: 'submit' }, 'Grant credits');
  const limit = (name) => h('input', { type: 'number', name, min: '1', step: '1', inputmode: 'numeric', value: a.limits && a.limits[name] != null ? String(a.limits[name]) : '' });
  const rpm = limit('rpm'), tpm = limit('tpm'), daily = limit('daily_tokens');
  const setLimits = h('button', { type: 'submit' }, 'Set limits');
  const num = (input) => (input.value === '' ? null : Number(input.value));
  return [
    h('h2', {}, 'Grant credits'),
    h('form', { class: 'card', onsubmit: (e) => { e.preventDefault(); act(grant, err, async () => {
      await operate('account.grant-credits', { email, credits: Number(credits.value), reason: reason.value.trim() });
      await reload(`Granted ${credits.value} credits.`);
    }); } }, field('Credits', credits, 'Negative corrects a balance.'), field('Reason', reason, 'Written in the ledger.'), grant),
    h('h2', {}, 'Model API limits'),
    h('form', { class: 'card', onsubmit: (e) => { e.preventDefault(); act(setLimits, err, async () => {
      await operate('account.set-limits', { email, rpm: num(rpm), tpm: num(tpm), daily_tokens: num(daily) });
      await reload('Limits saved.');
    }); } }, field('Requests per minute', rpm, 'Empty: the default.'), field('Tokens per minute', tpm), field('Daily tokens', daily), setLimits),
    h('h2', {}, 'Key and flags'),
    h('div', { class: 'card row' },
      a.verified ? null : h('button', { type: 'button', onclick: run('account.verify', {}, 'Verified.') }, 'Verify'),
      h('button', { type: 'button', class: 'secondary', onclick: run('account.rotate-key', {}, 'New key issued; the old one stopped.'), disabled: !a.verified || a.disabled }, 'Rotate key'),
      h('button', { type: 'button', class: 'secondary', onclick: run('account.revoke-key', {}, 'Key revoked.'), disabled: !a.has_api_token }, 'Revoke key'),
      h('button', { type: 'button', class: 'secondary', onclick: run('account.set-operator', { operator: !a.is_operator }, 'Operator flag changed.') }, a.is_operator ? 'Remove operator' : 'Make operator'),
      h('button', { type: 'button', class: a.disabled ? '' : 'danger', onclick: async (e) => {
        if (!a.disabled && !(await confirmDialog('Disable account?', `${email} is signed out and its key revoked.`, 'Disable', true))) return;
        run('account.disable', { disabled: !a.disabled }, a.disabled ? 'Enabled.' : 'Disabled.')(e);
      } }, a.disabled ? 'Enable' : 'Disable')),
  ];
}

async function accountPage(id) {
  const err = alertBox();
  const status = h('p', { role: 'status' });
  async function load(msg) {
    const d = await api('GET', `/api/operator/accounts/${encodeURIComponent(id)}`);
    const a = d.account;
    const l = a.limits;
    const facts = [
      ['E-mail', a.email], ['Balance', `${fmtCredits(a.credits)} credits`], ['Verified', yesNo(a.verified)], ['Editor', yesNo(a.is_editor)],
      ['Operator', yesNo(a.is_operator)], ['Disabled', yesNo(a.disabled)], ['API key', a.has_api_token ? 'issued' : 'none'],
      ['Limits', l ? `rpm ${l.rpm ?? 'default'}, tpm ${l.tpm ?? 'default'}, daily tokens ${l.daily_tokens ?? 'default'}` : 'defaults'],
      ['Instance', a.instance ? `${a.instance.instance_id}: ${a.instance.state} on ${a.instance.host || 'queue'}, ${a.instance.gpu_count} GPU` : 'none'],
      ['Usage today', d.usage_today ? `${d.usage_today.tokens_used.toLocaleString()} of ${d.usage_today.daily_cap.toLocaleString()} tokens, ${d.usage_today.requests} requests` : 'not available'],
      ['Signed up', fmtTime(a.created_at)],
    ];
    page(a.email, opNav('accounts'), err, status,
      h('dl', { class: 'facts card' }, facts.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      accountActions(a, err, load),
      h('h2', {}, 'Ledger'),
      table('Ledger, newest first', ['When', 'Kind', 'Reference', 'Credits'], d.ledger.map((e) => [fmtTime(e.created_at), e.kind.replace('_', ' '), e.ref || '', [(e.credits > 0 ? '+' : '') + fmtCredits(e.credits), 'num']]), 'No entries.'));
    status.textContent = msg || '';
  }
  await load();
}

// ---- coupons --------------------------------------------------------------------------------------

async function couponsPage() {
  const err = alertBox();
  const created = h('div', { role: 'status' });
  const list = h('div', {});
  const switchBox = h('div', { class: 'card row' });
  async function load() {
    const d = await api('GET', '/api/operator/coupons');
    const open = d.coupon_redemption === 'open';
    const toggle = h('button', { type: 'button', class: open ? 'danger' : '', onclick: () => act(toggle, err, async () => { await operate('coupon.redemption', { open: !open }); await load(); }) },
      open ? 'Close redemption' : 'Open redemption');
    switchBox.replaceChildren(h('span', {}, 'Redemption is ', h('strong', { id: 'redemption' }, d.coupon_redemption), open ? '.' : ' (tenants get 503 and Retry-After).'), toggle);
    list.replaceChildren(table('Coupons', ['Id', 'Credits', 'For', 'Redeemed'], d.coupons.slice().reverse().map((c) => [
      h('code', {}, c.id), [fmtCredits(c.credits), 'num'], c.issued_to || 'anyone', c.redeemed_by ? `by ${c.redeemed_by}, ${fmtTime(c.redeemed_at)}` : 'no',
    ]), 'No coupons yet.'));
  }
  const credits = h('input', { type: 'number', name: 'credits', min: '0', step: 'any', required: true, inputmode: 'decimal' });
  const email = h('input', { type: 'email', name: 'email', autocomplete: 'off' });
  const submit = h('button', { type: 'submit' }, 'Create coupon');
  const form = h('form', { class: 'card', onsubmit: (e) => { e.preventDefault(); act(submit, err, async () => {
    const c = await operate('coupon.create', { credits: Number(credits.value), ...(email.value.trim() ? { email: email.value.trim() } : {}) });
    const copy = h('button', { type: 'button', class: 'secondary', onclick: async () => {
      try { await navigator.clipboard.writeText(c.code); copy.textContent = 'Copied'; } catch { copy.textContent = 'Select and copy'; }
    } }, 'Copy code');
    created.replaceChildren(h('p', { class: 'notice' }, 'Code (shown once): ', h('code', { id: 'coupon-code' }, c.code), ` for ${fmtCredits(c.credits)} credits. `, copy));
    await load();
  }); } }, field('Credits', credits), field('Only for the account (e-mail)', email, 'Optional; empty: anyone may redeem it.'), submit);
  page('Coupons', opNav('coupons'), err, h('h2', {}, 'Redemption'), switchBox, h('h2', {}, 'New coupon'), form, created, h('h2', {}, 'Coupons'), list);
  await load();
}

// ---- hosts ----------------------------------------------------------------------------------------

function hostRow(x, err) {
  const run = (op, body) => (e) => act(e.target, err, () => operate(op, { name: x.name, ...body }));
  const used = x.gpus_total === null ? '?' : x.gpus_total - x.gpus_free;
  return [
    // reconciling: connected, taking no placements until the agent's instances are matched (as draining).
    h('strong', {}, x.name), h('span', {}, h('span', { class: `badge s-${x.state === 'connected' ? 'ready' : x.state === 'draining' || x.state === 'reconciling' ? 'pending' : 'failed'}` }, x.state),
      // Why it is not connected (the last dial or stream failure), so "unreachable" is actionable.
      x.unreachable_reason ? h('span', { class: 'hint host-reason' }, ` ${x.unreachable_reason}`) : null),
    x.gpus_total === null ? 'unknown' : `${used} used, ${x.gpus_free} free of ${x.gpus_total}`,
    x.instances.length ? x.instances.map((i) => `${i.instance_id} (${i.state}, ${i.gpu_count} GPU)`).join(', ') : 'none',
    x.connected ? 'now' : x.last_contact_at ? `${ago(x.last_contact_at)} ago` : 'never',
    h('div', { class: 'row' },
      x.draining ? h('button', { type: 'button', 'aria-label': `Resume ${x.name}`, onclick: run('host.resume') }, 'Resume')
        : h('button', { type: 'button', class: 'secondary', 'aria-label': `Drain ${x.name}`, onclick: run('host.drain') }, 'Drain'),
      x.registered ? h('button', { type: 'button', class: 'danger', 'aria-label': `Remove ${x.name}`, onclick: async (e) => {
        const force = x.instances.length > 0;
        if (!(await confirmDialog('Remove host?', force ? `Its ${x.instances.length} instance(s) are ended first (billed up to now).` : `${x.name} is forgotten.`, 'Remove', true))) return;
        run('host.remove', { force })(e);
      } }, 'Remove') : null),
  ];
}

function hostsPage() {
  const err = alertBox();
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const name = h('input', { name: 'name', required: true, autocomplete: 'off' });
  const address = h('input', { name: 'address', required: true, autocomplete: 'off', placeholder: 'host:port' });
  const token = h('input', { type: 'password', name: 'token', required: true, autocomplete: 'off' });
  const submit = h('button', { type: 'submit' }, 'Add host');
  const form = h('form', { class: 'card', onsubmit: (e) => { e.preventDefault(); act(submit, err, async () => {
    await operate('host.add', { name: name.value.trim(), address: address.value.trim(), token: token.value.trim() });
    for (const input of [name, address, token]) input.value = '';
  }); } }, field('Name', name), field('Agent address', address, 'host:port of the agent’s gRPC server.'), field('Agent token', token, 'The agent’s token file.'), submit);
  // Every GPU of every host with its figures and history (gpus.js).
  const gpuBox = h('section', { 'aria-labelledby': 'gpus-h' });
  const gpus = hostGpus(gpuBox, table);
  page('Hosts', opNav('hosts'), err, list, gpuBox, h('h2', {}, 'Add a host'), form);
  follow('hosts', (d) => {
    list.replaceChildren(table('Hosts', ['Host', 'State', 'GPUs', 'Instances', 'Last contact', 'Actions'], d.hosts.map((x) => hostRow(x, err)), 'No hosts.'));
    gpus.update(d.hosts);
  }, err);
}

// ---- instances ------------------------------------------------------------------------------------

function instancesPage() {
  const err = alertBox();
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const destroy = (i) => async (e) => {
    const reason = await reasonDialog('Destroy instance?', `${i.instance_id} of ${i.email} stops now; billing stops.`, 'Reason (shown to the owner)', 'Destroy');
    if (reason) act(e.target, err, () => operate('instance.destroy', { instance_id: i.instance_id, reason }));
  };
  const draw = (instances) => {
    // By host, then account: the queue (no host) last.
    const sorted = instances.slice().sort((a, b) => (a.host ?? '~').localeCompare(b.host ?? '~') || (a.email ?? '').localeCompare(b.email ?? ''));
    list.replaceChildren(table('Live instances by host and account', ['Host', 'Account', 'Instance', 'State', 'Age', 'GPUs', 'Credits/h', 'Spent', 'Actions'], sorted.map((i) => [
      i.host || 'queued', i.email || String(i.account_id), h('code', {}, i.instance_id), `${i.state}${i.message !== i.state ? ` (${i.message})` : ''}`,
      ago(i.created_at), [String(i.gpu_count), 'num'], [fmtCredits(i.credits_per_hour), 'num'], [fmtCredits(i.credits_spent), 'num'],
      i.state === 'stopping' ? '—' : h('button', { type: 'button', class: 'danger', 'aria-label': `Destroy ${i.instance_id}`, onclick: destroy(i) }, 'Destroy'),
    ]), 'No instance is running or queued.'));
  };
  page('Instances', opNav('instances'), err, list);
  follow('instances', (d) => draw(d.instances), err);
}

// ---- catalogs -------------------------------------------------------------------------------------

function imageSection(images, err, reload) {
  const name = h('input', { name: 'name', required: true });
  const image = h('input', { name: 'image', required: true, spellcheck: 'false' });
  const ssh = h('input', { type: 'checkbox', name: 'ssh' });
  const submit = h('button', { type: 'submit' }, 'Add image');
  // Whether an image serves SSH decides whether its instances are offered SSH (the tenant's pages say so).
  const sshCell = (i) => h('span', { class: 'row' }, yesNo(i.ssh), h('button', { type: 'button', class: 'secondary', 'aria-label': `Mark ${i.image} as ${i.ssh ? 'not serving' : 'serving'} SSH`,
    onclick: (e) => act(e.target, err, async () => { await operate('image.set-ssh', { image: i.image, ssh: !i.ssh }); await reload(); }) }, i.ssh ? 'Turn off' : 'Turn on'));
  return [
    h('h2', {}, 'Images'),
    table('Images', ['Name', 'Image', 'Enabled', 'SSH', 'Actions'], images.map((i) => [i.name, h('code', {}, i.image), yesNo(i.enabled), sshCell(i),
      i.enabled ? h('button', { type: 'button', class: 'secondary', 'aria-label': `Disable ${i.image}`, onclick: (e) => act(e.target, err, async () => { await operate('image.disable', { image: i.image }); await reload(); }) }, 'Disable') : '—'])),
    h('form', { class: 'card', onsubmit: (e) => { e.preventDefault(); act(submit, err, async () => { await operate('image.add', { name: name.value.trim(), image: image.value.trim(), ssh: ssh.checked }); await reload(); }); } },
      field('Name', name), field('Image', image, 'A registry reference, e.g. rc/jupyter-pytorch:latest; adding a disabled one enables it.'),
      field('Serves SSH', ssh, 'It runs an SSH server on port 22 that takes root’s authorized_keys; only then are its instances offered SSH.'), submit),
  ];
}

/** The upstream check (model.check) in sentences: what was checked, what failed, per upstream. */
function checkResult(c) {
  return h('div', { class: `check-result ${c.ok ? 'ok' : 'bad'}`, id: 'model-check', role: 'status' },
    h('p', { class: 'row' }, h('strong', {}, c.ok ? 'Check passed.' : 'Check failed.'), c.upstreams.length ? '' : c.summary),
    c.upstreams.map((u) => h('div', {}, h('code', {}, u.url), h('ul', {}, u.sentences.map((x) => h('li', {}, x))))));
}

/** The window in use: the catalog's, else the backend's figure (said so), else unknown. */
function contextCell(m) {
  if (m.context === null || m.context === undefined) return h('span', { class: 'hint' }, 'unknown (the backend does not say)');
  return h('span', {}, `${m.context.toLocaleString()} tokens`, m.contextSource === 'backend' ? h('span', { class: 'hint' }, ' (from the backend)') : '');
}

function modelSection(models, err, reload) {
  const name = h('input', { name: 'model', required: true, spellcheck: 'false' });
  const served = h('input', { name: 'served_name', spellcheck: 'false', autocomplete: 'off' });
  const upstreams = h('textarea', { name: 'upstreams', rows: '2', spellcheck: 'false' });
  const maxContext = h('input', { type: 'number', name: 'max_context', min: '1', step: '1', inputmode: 'numeric' });
  const submit = h('button', { type: 'submit' }, 'Check and save');
  const result = h('div', { 'aria-live': 'polite' });
  const anyway = h('button', { type: 'button', class: 'danger', hidden: true }, 'Save anyway');
  const body = () => {
    const b = { name: name.value.trim(), upstreams: upstreams.value.split(/\s+/).filter(Boolean) };
    if (served.value.trim()) b.servedName = served.value.trim();
    if (maxContext.value) b.maxContext = Number(maxContext.value);
    return b;
  };
  // Saving checks the upstreams first (the server checks again): a failure is shown and not saved
  // unless the operator confirms "Save anyway" (model.add with unchecked, recorded in the audit log).
  const save = (unchecked) => act(unchecked ? anyway : submit, err, async () => {
    const b = body();
    let found = '';
    if (!unchecked) {
      anyway.hidden = true;
      const c = await operate('model.check', { name: b.name, upstreams: b.upstreams, servedName: b.servedName });
      result.replaceChildren(checkResult(c));
      if (!c.ok) { anyway.hidden = false; return; }
      found = ` ${c.summary}`;
    } else if (!(await confirmDialog('Save without a passing check?', `“${b.name}” goes into the shared catalog now; requests for it fail until its upstreams serve it.`, 'Save anyway', true))) return;
    await operate('model.add', unchecked ? { ...b, unchecked: true } : b);
    await reload(`Saved “${b.name}”${unchecked ? ' without a passing check' : ''}.${found}`);
  });
  anyway.onclick = () => save(true);
  return [
    h('h2', {}, 'Shared models'),
    table('Shared models', ['Name', 'Served name', 'Upstreams', 'Context', 'Source', 'Actions'], models.map((m) => [h('code', {}, m.name), m.servedName ? h('code', {}, m.servedName) : 'same', m.upstreams.join(', ') || 'embedded sim',
      contextCell(m), m.source,
      m.source === 'database' ? h('button', { type: 'button', class: 'secondary', 'aria-label': `Remove ${m.name}`, onclick: async (e) => {
        if (!(await confirmDialog('Remove model?', `“${m.name}” leaves the shared catalog now: requests for it get 404 until it is added again.`, 'Remove', true))) return;
        act(e.target, err, async () => { await operate('model.remove', { name: m.name }); await reload(); });
      } }, 'Remove') : 'RC_CONFIG'])),
    h('form', { class: 'card', id: 'model-form', onsubmit: (e) => { e.preventDefault(); save(false); } },
      field('Model name', name, 'What clients send as “model”.'),
      field('Served name', served, 'The name the backend was started with (vLLM and SGLang --served-model-name, llama.cpp --alias); empty: the model name.'),
      field('Upstreams', upstreams, 'OpenAI-compatible base URLs, one per line; replaces a model of the same name.'),
      field('Context window (tokens)', maxContext, 'Empty: the backend’s.'),
      h('p', { class: 'hint' }, 'Saving first checks each upstream: it must list the served name (GET /v1/models) and answer a one-token completion.'),
      result, h('div', { class: 'row' }, submit, anyway)),
  ];
}

async function catalogsPage() {
  const err = alertBox();
  async function load(saved) {
    const d = await api('GET', '/api/operator/catalogs');
    page('Catalogs', opNav('catalogs'), err, saved ? h('p', { class: 'notice', role: 'status', id: 'catalog-saved' }, saved) : null,
      imageSection(d.images, err, load), modelSection(d.models, err, load),
      h('p', { class: 'hint' }, 'Per-account model limits are set on each account’s page.'));
  }
  await load();
}

// ---- usage ----------------------------------------------------------------------------------------

/** Bars by day (rows: [{day, value}] or stacked {day, parts: {name: value}}) as inline SVG, with its figures as a table. */
function dayChart(title, unit, rows) {
  const names = [...new Set(rows.flatMap((r) => Object.keys(r.parts)))].sort();
  const colour = (m) => MODEL_COLOURS[names.indexOf(m) % MODEL_COLOURS.length];
  const totals = rows.map((r) => Object.values(r.parts).reduce((a, b) => a + b, 0));
  const max = Math.max(1e-9, ...totals);
  const w = 242 / rows.length;
  const bars = rows.flatMap((r, i) => {
    let y = 100;
    return Object.entries(r.parts).filter(([, v]) => v > 0).map(([m, v]) => {
      const height = (92 * v) / max;
      y -= height;
      return svg('rect', { x: 28 + i * w + 0.5, y, width: Math.max(1, w - 1), height, fill: colour(m) }, svg('title', {}, `${r.day} ${m}: ${v.toLocaleString()} ${unit}`));
    });
  });
  const peak = totals.indexOf(Math.max(...totals));
  const label = `${title}: ${totals.filter((t) => t > 0).length} of ${rows.length} days with use, peak ${totals[peak].toLocaleString()} ${unit} on ${rows[peak].day}`;
  return h('figure', { class: 'hours' },
    // The view box starts left of 0: room for a top label as long as 0.0002.
    svg('svg', { viewBox: '-12 0 282 116', role: 'img', 'aria-label': label },
      svg('line', { x1: 28, y1: 8, x2: 270, y2: 8 }), svg('line', { x1: 28, y1: 100, x2: 270, y2: 100, class: 'axis' }),
      svg('text', { x: 25, y: 11, 'text-anchor': 'end' }, max < 1 ? max.toPrecision(1) : compact(max)), svg('text', { x: 25, y: 103, 'text-anchor': 'end' }, '0'),
      svg('text', { x: 28, y: 113 }, rows[0].day.slice(5)), svg('text', { x: 270, y: 113, 'text-anchor': 'end' }, rows[rows.length - 1].day.slice(5)), bars),
    names.length > 1 ? h('figcaption', {}, h('ul', { class: 'legend' }, names.map((m) => h('li', {}, svg('svg', { viewBox: '0 0 10 10', 'aria-hidden': 'true' }, svg('rect', { width: 10, height: 10, fill: colour(m) })), m)))) : null,
    h('table', { class: 'sr-only' }, h('caption', {}, title),
      h('thead', {}, h('tr', {}, ['Day', 'Series', unit].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows.flatMap((r) => Object.entries(r.parts).filter(([, v]) => v > 0).map(([m, v]) => h('tr', {}, h('td', {}, r.day), h('td', {}, m), h('td', {}, v.toLocaleString())))))));
}

async function usagePage() {
  page('Usage', opNav('usage'), h('p', { class: 'muted' }, 'Loading…'));
  const u = await api('GET', '/api/operator/usage');
  const sm = u.shared_models;
  const todayUsed = sm && sm.today.by_hour.some((hr) => hr.requests > 0);
  page('Usage', opNav('usage'),
    h('h2', {}, `Shared models today (${u.day}, UTC)`),
    !sm ? h('p', { class: 'muted' }, 'The gates’ usage is not wired to this control plane.')
      : todayUsed ? hourChart(sm.today.by_hour) : h('p', { class: 'muted' }, 'No requests today.'),
    sm ? [h('h2', {}, 'Shared models, last 30 days'),
      sm.by_day.some((d) => d.tokens > 0) ? dayChart('Shared-model tokens by day and model', 'tokens', sm.by_day.map((d) => ({ day: d.day, parts: d.by_model }))) : h('p', { class: 'muted' }, 'No requests in these days.'),
      h('h3', {}, 'Top accounts, last 30 days'),
      table('Top accounts by shared-model tokens, last 30 days', ['Account', 'Tokens', 'Requests'], sm.top_accounts.map((a) => [h('a', { href: `/operator/accounts/${a.account_id}` }, a.email), [a.tokens.toLocaleString(), 'num'], [String(a.requests), 'num']]), 'No requests in these days.')] : null,
    h('h2', {}, 'Instances, last 30 days'),
    h('h3', {}, 'GPU hours by day'),
    dayChart('GPU hours by day', 'GPU hours', u.instances_by_day.map((d) => ({ day: d.day, parts: { 'GPU hours': d.gpu_hours } }))),
    h('h3', {}, 'Credits consumed by day'),
    dayChart('Credits consumed by day', 'credits', u.instances_by_day.map((d) => ({ day: d.day, parts: { credits: d.credits } }))),
    h('h3', {}, 'Top accounts by credits (30 days)'),
    table('Top accounts by credits consumed, last 30 days', ['Account', 'Credits'], u.top_accounts_by_credits.map((a) => [h('a', { href: `/operator/accounts/${a.account_id}` }, a.email), [fmtCredits(a.credits), 'num']]), 'No instance usage yet.'));
}

// ---- audit log ------------------------------------------------------------------------------------

async function auditPage() {
  const err = alertBox();
  const body = h('tbody');
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Older entries');
  let before = null;
  const cell = (label, ...c) => h('td', { 'data-label': label }, c);
  // Filters the loaded entries by any text of a row (who, action, target, input); "Older entries" loads more.
  const filter = h('input', { type: 'search', name: 'audit-filter', autocomplete: 'off', oninput: () => applyFilter() });
  const shown = h('p', { class: 'hint', role: 'status' });
  function applyFilter() {
    const q = filter.value.trim().toLowerCase();
    let n = 0;
    for (const tr of body.rows) {
      tr.hidden = Boolean(q) && !tr.textContent.toLowerCase().includes(q);
      if (!tr.hidden) n++;
    }
    shown.textContent = q ? `${n} of ${body.rows.length} loaded entries match.` : '';
  }
  async function load() {
    const d = await api('GET', `/api/operator/audit?limit=50${before ? `&before=${before}` : ''}`);
    for (const e of d.entries) {
      // The input whole, indented: readable, and wrapped rather than cut off.
      body.append(h('tr', {}, cell('When', fmtTime(e.at)), cell('Who', e.actor), cell('Action', h('code', {}, e.action)), cell('Target', e.target || '—'),
        cell('Input', e.detail ? h('pre', { class: 'audit-input' }, JSON.stringify(e.detail, null, 2)) : '')));
    }
    before = d.next_before;
    more.hidden = before === null;
    applyFilter();
  }
  more.onclick = () => act(more, err, load);
  page('Audit log', opNav('audit'), err,
    h('form', { class: 'card', role: 'search', onsubmit: (e) => e.preventDefault() }, field('Filter', filter, 'Who, action, target or input, among the loaded entries.'), shown),
    h('div', { class: 'table' }, h('table', { class: 'stack' }, h('caption', { class: 'sr-only' }, 'Operator actions, newest first'),
      h('thead', {}, h('tr', {}, ['When', 'Who', 'Action', 'Target', 'Input'].map((c) => h('th', { scope: 'col' }, c)))), body)), more);
  await load();
}

// ---- routing --------------------------------------------------------------------------------------

const PAGES = [
  [/^\/operator\/review$/, reviewPage],
  [/^\/operator\/accounts$/, accountsPage],
  [/^\/operator\/accounts\/(\d+)$/, (m) => accountPage(m[1])],
  [/^\/operator\/coupons$/, couponsPage],
  [/^\/operator\/hosts$/, hostsPage],
  [/^\/operator\/instances$/, instancesPage],
  [/^\/operator\/catalogs$/, catalogsPage],
  [/^\/operator\/usage$/, usagePage],
  [/^\/operator\/audit$/, auditPage],
];

/** Renders the operator page of `path` (app.js checked that the session is an operator's). */
export async function render(path) {
  if (path === '/operator' || path === '/operator/') return go('/operator/review', true);
  const found = PAGES.find(([re]) => re.test(path));
  if (!found) return page('Not found', opNav(null), h('p', {}, 'No such operator page.'));
  await found[1](found[0].exec(path));
}
