// The rc console: one page script, no framework, no build step. Every action goes through the
// platform API on this origin with the session cookie and, on writes, the session's CSRF token.
// Pages are client-side routes (the server answers index.html for each, serve.ts). The operator's
// pages are their own module (operator.js), loaded only when an operator opens one; it takes the
// helpers below from this module's exports.

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');

/** The signed-in account, whether it is an operator, and the session's CSRF token (null when signed out). */
export const session = { account: null, operator: false, csrf: null };
/** What the current page must stop when another page renders (event streams, timers). */
const cleanups = [];
/** Runs `fn` when the current page is left. */
export const onLeave = (fn) => cleanups.push(fn);

// ---- small DOM helpers -----------------------------------------------------------------------

/** h('tag', {attr: value, onclick: fn}, ...children): an element; null/false children are skipped. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

let idSeq = 0;
/** A labelled form field; `input` gets an id and, with a hint, aria-describedby. `error`: its error slot (fieldError). */
export function field(label, input, hint, error) {
  const id = input.id || `f${++idSeq}`;
  input.id = id;
  const hintEl = hint ? h('span', { class: 'hint', id: `${id}-hint` }, hint) : null;
  if (error) error.id = `${id}-error`;
  const described = [hintEl && hintEl.id, error && error.id].filter(Boolean).join(' ');
  if (described) input.setAttribute('aria-describedby', described);
  if (input.type === 'checkbox') return h('div', { class: 'field check' }, input, h('label', { for: id }, label), hintEl, error);
  return h('div', { class: 'field' }, h('label', { for: id }, label), input, error, hintEl);
}

/** An error slot shown next to its field (empty: hidden); announced when set. */
const fieldError = () => h('span', { class: 'field-error', role: 'alert' });

/** Replaces the page with a heading (focused, for screen readers) and `children`. */
export function page(title, ...children) {
  document.title = `${title} · rc console`;
  const h1 = h('h1', { tabindex: '-1' }, title);
  // Absent parts (null, false) are skipped: replaceChildren would print them as text ("null").
  main.replaceChildren(h1, ...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  h1.focus();
}

/** An error box whose text is announced when set. */
export const alertBox = () => h('div', { class: 'alert', role: 'alert' });

export const fmtCredits = (n) => (Math.round(n * 10000) / 10000).toLocaleString(undefined, { maximumFractionDigits: 4 });
export const fmtTime = (iso) => (iso ? new Date(iso).toLocaleString() : '—');
function fmtIn(iso) {
  if (!iso) return '';
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (s <= 0) return 'now';
  const hrs = Math.floor(s / 3600), min = Math.floor((s % 3600) / 60);
  return hrs ? `in ${hrs} h ${min} min` : min ? `in ${min} min` : `in ${s} s`;
}

/** A read-only code block with a Copy button. */
function snippet(text, label) {
  const pre = h('pre', { 'aria-label': label, tabindex: '0' }, text);
  const copy = h('button', { type: 'button', class: 'secondary', onclick: async () => {
    try { await navigator.clipboard.writeText(text); copy.textContent = 'Copied'; } catch { copy.textContent = 'Select and copy'; }
  } }, 'Copy');
  return h('div', { class: 'snippet' }, pre, copy);
}

/** A modal confirmation; resolves true when confirmed. */
export function confirmDialog(title, text, confirmLabel, danger) {
  return new Promise((resolve) => {
    const ok = h('button', { type: 'submit', value: 'ok', class: danger ? 'danger' : '' }, confirmLabel);
    const dlg = h('dialog', { 'aria-labelledby': 'dlg-title' },
      h('form', { method: 'dialog' },
        h('h2', { id: 'dlg-title' }, title), h('p', {}, text),
        h('div', { class: 'row' }, ok, h('button', { type: 'submit', value: 'cancel', class: 'secondary' }, 'Cancel'))));
    dlg.addEventListener('close', () => { resolve(dlg.returnValue === 'ok'); dlg.remove(); });
    document.body.append(dlg);
    dlg.showModal();
  });
}

// ---- the API -----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === 'string' ? detail : (detail && detail.message) || `HTTP ${status}`);
    this.status = status;
    this.detail = detail;
  }
}

/** Calls the platform API; JSON in and out. An unverified account's 403 goes to the review page. */
export async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (method !== 'GET') {
    headers['content-type'] = 'application/json';
    if (session.csrf) headers['x-csrf-token'] = session.csrf;
  }
  const res = await fetch(path, { method, headers, credentials: 'same-origin', body: method === 'GET' ? undefined : JSON.stringify(body || {}) });
  const data = await res.json().catch(() => ({}));
  if (res.ok) return data;
  const detail = data.detail;
  if (res.status === 403 && detail && detail.code === 'account_not_verified') {
    go(detail.redirect || '/review');
  } else if (res.status === 401 && session.account && path !== '/api/auth/login') {
    setSession(null);
    go('/signin');
  }
  throw new ApiError(res.status, detail);
}

/** Runs `fn` with the button disabled, showing an error in `box`. */
export async function act(button, box, fn) {
  box.textContent = '';
  if (button) button.disabled = true;
  try {
    await fn();
  } catch (err) {
    box.textContent = err.message;
  } finally {
    if (button) button.disabled = false;
  }
}

function setSession(s) {
  session.account = s ? s.account : null;
  session.operator = s ? s.operator === true : false;
  session.csrf = s ? s.csrf_token : null;
  nav.hidden = !session.account;
  // Only operators see the link; the operator API refuses everyone else anyway.
  document.getElementById('nav-operator').hidden = !session.operator;
  who.replaceChildren();
  if (session.account) {
    append(who, [
      h('span', {}, session.account.email, session.account.verified ? '' : ' (under review)'),
      h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Sign out'),
    ]);
  }
}

async function signOut() {
  try { await api('POST', '/api/auth/logout', {}); } catch { /* signed out anyway */ }
  setSession(null);
  go('/signin');
}

// ---- pages ---------------------------------------------------------------------------------------

function authPage(kind) {
  const signup = kind === 'signup';
  const err = alertBox();
  const email = h('input', { type: 'email', name: 'email', autocomplete: 'email', required: true });
  const password = h('input', { type: 'password', name: 'password', autocomplete: signup ? 'new-password' : 'current-password', required: true, minlength: '8' });
  const submit = h('button', { type: 'submit' }, signup ? 'Create account' : 'Sign in');
  const form = h('form', { class: 'card', novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    act(submit, err, async () => {
      const s = await api('POST', signup ? '/api/auth/signup' : '/api/auth/login', { email: email.value, password: password.value });
      // E-mail verification on: no session yet, the same answer for a new and a known address.
      if (s.email_verification === 'sent') {
        err.textContent = s.detail;
        return;
      }
      setSession(s);
      go(s.account.verified ? '/instance' : '/review');
    });
  } },
  err,
  field('E-mail', email),
  field('Password', password, signup ? 'At least 8 characters.' : null),
  submit);
  page(signup ? 'Create an account' : 'Sign in', form,
    signup ? h('p', {}, 'Have an account? ', h('a', { href: '/signin' }, 'Sign in'))
      : h('p', {}, 'New here? ', h('a', { href: '/signup' }, 'Create an account')));
}

function reviewPage() {
  const err = alertBox();
  const check = h('button', { type: 'button', onclick: () => act(check, err, async () => {
    setSession(await api('GET', '/api/auth/session'));
    if (session.account.verified) go('/instance');
    else err.textContent = 'Still under review.';
  }) }, 'Check again');
  page('Your account is under review',
    h('p', { class: 'notice' }, 'An operator reviews new accounts before they can launch GPU instances or hold an API key.'),
    h('h2', {}, 'Meanwhile'),
    h('ul', {},
      h('li', {}, 'The shared model APIs are free and work from this browser session: see ', h('a', { href: '/models' }, 'Model APIs'), '.'),
      h('li', {}, 'Add your SSH key on the ', h('a', { href: '/account' }, 'Account'), ' page, and redeem coupons on ', h('a', { href: '/credits' }, 'Credits'), '.')),
    h('p', { class: 'hint', 'aria-live': 'polite' }, 'This page checks every 10 seconds and opens your instance page once you are verified.'),
    err, check);
  // Someone else (an operator) decides: look again on our own; the session carries `verified`.
  const poll = setInterval(async () => {
    try {
      const s = await api('GET', '/api/auth/session');
      if (s.account && s.account.verified) { setSession(s); go('/instance'); }
    } catch { /* signed out or offline: the button still works */ }
  }, 10_000);
  onLeave(() => clearInterval(poll));
}

// -- templates

const INSTANCE_TYPES = ['jupyter', 'gradio', 'streamlit', 'comfyui', 'vllm', 'sglang', 'custom'];
const ROUTED_PORTS = [[7860, 'gradio'], [8501, 'streamlit'], [8188, 'comfyui'], [8000, 'vllm'], [30000, 'sglang']];

async function templatesPage() {
  const err = alertBox();
  page('Templates', err, h('p', { class: 'muted' }, 'Loading…'));
  const [mine, pub, quote] = await Promise.all([api('GET', '/api/profile/templates'), api('GET', '/api/templates'), api('GET', '/api/launch-quote')]);
  const cell = (label, ...c) => h('td', { 'data-label': label }, c);
  const rows = mine.templates.map((t) => h('tr', {},
    cell('Title', t.title), cell('Image', h('code', {}, t.image)), cell('Type', t.instance_type),
    cell('SSH', t.ssh_enabled ? (t.image_ssh ? 'yes' : 'on, but the image runs no SSH server') : 'no'), cell('Visibility', t.enabled ? 'public' : 'private'),
    cell('Actions', h('div', { class: 'row' },
      h('a', { class: 'button', href: `/launch/${t.id}`, 'aria-label': `Launch ${t.title}` }, 'Launch'),
      h('a', { href: `/templates/${t.id}/edit`, 'aria-label': `Edit ${t.title}` }, 'Edit'),
      h('button', { type: 'button', class: 'secondary', 'aria-label': `Delete ${t.title}`, onclick: async (e) => {
        if (!(await confirmDialog('Delete template?', `“${t.title}” will be deleted. Running instances keep their configuration.`, 'Delete', true))) return;
        act(e.target, err, async () => { await api('DELETE', `/api/profile/templates/${t.id}`); templatesPage(); });
      } }, 'Delete')))));
  const publicCards = pub.templates.filter((t) => !t.owned).map((t) => h('article', { class: 'card' },
    h('h3', {}, t.title), h('p', { class: 'muted' }, t.description || `${t.instance_type} · ${t.image}`),
    h('a', { class: 'button', href: `/launch/${t.id}`, 'aria-label': `Launch ${t.title}` }, 'Launch')));
  page('Templates', err, priceSummary(quote),
    h('div', { class: 'row' }, h('a', { class: 'button', href: '/templates/new' }, 'New template')),
    h('h2', {}, 'Your templates'),
    rows.length
      ? h('div', { class: 'table' }, h('table', { class: 'stack' }, h('thead', {}, h('tr', {}, ['Title', 'Image', 'Type', 'SSH', 'Visibility', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))), h('tbody', {}, rows)))
      : h('p', { class: 'muted' }, 'None yet.'),
    h('h2', {}, 'Public templates'),
    publicCards.length ? h('div', { class: 'grid' }, publicCards) : h('p', { class: 'muted' }, 'None published.'));
}

/** Price per GPU count, the balance and how long it lasts, free GPUs, launches left: above every template list. */
function priceSummary(q) {
  const cap = q.capacity;
  const prices = q.options.map((o) => `${o.gpu_count} GPU${o.gpu_count > 1 ? 's' : ''}: ${fmtCredits(o.credits_per_hour)}/h (${o.affordable ? fmtHours(o.hours_affordable) : 'not enough credits'})`);
  return h('section', { class: 'card', id: 'price-summary', 'aria-label': 'Prices and capacity' },
    h('p', { class: 'price' }, h('strong', {}, 'Balance '), `${fmtCredits(q.balance)} credits · `, h('a', { href: '/credits' }, 'Credits')),
    h('p', { class: 'price' }, h('strong', {}, 'Credits per hour '), prices.join(' · ')),
    h('p', { class: 'price' }, h('strong', {}, 'Free GPUs '), `${cap.free_gpus}${cap.gpu_model ? ` × ${cap.gpu_model}` : ''}, at most ${cap.largest_free} on one host`, cap.queued ? `; ${cap.queued} waiting` : ''),
    launchRateNote(q.launch_rate));
}

const TYPE_LABEL = { vllm: 'vLLM', sglang: 'SGLang' };

/**
 * The template API's validation messages ("disk_gb: Too big: ...", "title must not be empty",
 * "Invalid image selected"; several joined by "; ") as sentences for the fields they name, in the
 * form's words. Anything not about a field of this form stays a message for the whole form.
 */
function templateFieldErrors(message, type) {
  const out = {};
  const rest = [];
  for (const part of message.split('; ')) {
    const m = /^(title|image|instance_type|app_port|start_command|description|disk_gb)\b/.exec(part);
    const name = m ? m[1] : part === 'Invalid image selected' ? 'image' : null;
    if (!name) rest.push(part);
    else out[name] = templateSentence(name, part, type);
  }
  return { fields: out, rest: rest.join(' ') };
}

function templateSentence(name, raw, type) {
  switch (name) {
    case 'title': return /empty|required/.test(raw) ? 'Give the template a title.' : 'The title can have at most 200 characters.';
    case 'image': return 'Pick an image from the catalog: this one is not available.';
    case 'instance_type': return 'Pick one of the instance types.';
    case 'app_port': return 'Pick one of the routed ports, or the instance type\'s default.';
    case 'start_command': return /required/.test(raw)
      ? `A ${TYPE_LABEL[type] || type} template needs a start command: the command that serves the model on $PORT.`
      : 'The start command can have at most 8192 characters.';
    case 'description': return 'The description can have at most 10,000 characters.';
    default: return 'The disk size is a whole number of GB from 100 to 200.';
  }
}

/** The same rules checked before sending, so the common mistakes get their sentence at once. */
function checkTemplate(body) {
  const f = {};
  if (!body.title.trim()) f.title = templateSentence('title', 'empty');
  if ((body.instance_type === 'vllm' || body.instance_type === 'sglang') && !body.start_command) f.start_command = templateSentence('start_command', 'required', body.instance_type);
  if (!Number.isInteger(body.disk_gb) || body.disk_gb < 100 || body.disk_gb > 200) f.disk_gb = templateSentence('disk_gb', '');
  return f;
}

/** The instance type an image is made for, from its name (rc/gradio:latest → gradio); null when none. */
const typeOfImage = (image) => INSTANCE_TYPES.find((x) => new RegExp(`(^|/)${x}([-:]|$)`).test(image)) || null;

async function templateFormPage(id) {
  const editing = id !== undefined;
  page(editing ? 'Edit template' : 'New template', h('p', { class: 'muted' }, 'Loading…'));
  const [{ images }, t, me] = await Promise.all([
    api('GET', '/api/profile/templates'),
    editing ? api('GET', `/api/profile/templates/${id}`) : Promise.resolve(null),
    api('GET', '/api/me'),
  ]);
  // A new template's defaults agree: the first catalog image and the type it is made for (the API's default type is jupyter).
  const firstImage = images[0] ? images[0].image : '';
  const v = t || { title: '', image: firstImage, instance_type: typeOfImage(firstImage) || 'jupyter', app_port: null, start_command: '', ssh_enabled: false, persistent_storage: false, disk_gb: 100, enabled: false, description: '', slug: null, branch: 'main', tags: [], sort_order: 0 };
  const err = alertBox();
  const errs = Object.fromEntries(['title', 'image', 'instance_type', 'app_port', 'start_command', 'description', 'disk_gb'].map((k) => [k, fieldError()]));
  const opt = (value, label, selected) => h('option', { value, selected }, label);
  const title = h('input', { name: 'title', required: true, value: v.title, maxlength: '200' });
  const type = h('select', { name: 'instance_type' }, INSTANCE_TYPES.map((x) => opt(x, x, x === v.instance_type)));
  let typeTouched = editing;
  type.addEventListener('change', () => { typeTouched = true; });
  // Until the type is picked by hand, it follows the image (the Gradio image is a gradio template).
  const image = h('select', { name: 'image', onchange: () => { const x = typeOfImage(image.value); if (!typeTouched && x) type.value = x; showSshNote(); } },
    images.map((i) => opt(i.image, `${i.name} (${i.image})${i.ssh ? ' · SSH' : ''}`, i.image === v.image)));
  if (t && !images.some((i) => i.image === t.image)) image.prepend(opt(t.image, `${t.image} (disabled: pick another)`, true));
  const port = h('select', { name: 'app_port' }, opt('', 'Default of the instance type', v.app_port === null), ROUTED_PORTS.map(([p, n]) => opt(String(p), `${p} (${n})`, p === v.app_port)));
  const command = h('textarea', { name: 'start_command', rows: '3' });
  command.value = v.start_command || '';
  const description = h('textarea', { name: 'description', rows: '2' });
  description.value = v.description || '';
  // SSH needs an image that serves it and a key saved before the launch (it is copied then): say
  // which is missing where SSH is switched on.
  const sshNote = h('p', { class: 'warning', id: 'ssh-key-note', role: 'status', hidden: true });
  const ssh = h('input', { type: 'checkbox', name: 'ssh_enabled', checked: v.ssh_enabled, onchange: () => showSshNote() });
  function showSshNote() {
    const img = images.find((i) => i.image === image.value);
    const noServer = img && !img.ssh;
    sshNote.hidden = !(ssh.checked && (noServer || !me.ssh_public_key));
    sshNote.replaceChildren(
      noServer ? `The image ${img.image} runs no SSH server: instances of this template get no SSH. Pick an image marked “SSH”. ` : '',
      ...(me.ssh_public_key ? [] : ['No SSH key saved: add one on ', h('a', { href: '/account' }, 'Account'), ' before launching, or nobody can log in.']));
  }
  showSshNote();
  const persistent = h('input', { type: 'checkbox', name: 'persistent_storage', checked: v.persistent_storage });
  const disk = h('input', { type: 'number', name: 'disk_gb', min: '100', max: '200', step: '1', value: String(v.disk_gb), inputmode: 'numeric' });
  const enabled = h('input', { type: 'checkbox', name: 'enabled', checked: v.enabled });
  const inputs = { title, image, instance_type: type, app_port: port, start_command: command, description, disk_gb: disk };
  const showErrors = (fields) => {
    for (const [k, el] of Object.entries(errs)) {
      el.textContent = fields[k] || '';
      if (fields[k]) inputs[k].setAttribute('aria-invalid', 'true');
      else inputs[k].removeAttribute('aria-invalid');
    }
    const firstBad = Object.keys(errs).find((k) => fields[k]);
    if (firstBad) inputs[firstBad].focus();
  };
  const submit = h('button', { type: 'submit' }, editing ? 'Save' : 'Create template');
  const form = h('form', { class: 'card', novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    act(submit, err, async () => {
      // PUT replaces the template: send every field, the ones this form does not show as loaded.
      const body = {
        title: title.value, image: image.value, instance_type: type.value,
        app_port: port.value ? Number(port.value) : null, start_command: command.value.trim() || null,
        description: description.value.trim() || null, ssh_enabled: ssh.checked, persistent_storage: persistent.checked,
        disk_gb: disk.value === '' ? 100 : Number(disk.value),
        slug: v.slug || null, category: v.category || null, tags: v.tags || [], repo_url: v.repo_url || null, branch: v.branch || 'main',
        notebook_path: v.notebook_path || null, cover_url: v.cover_url || null, sort_order: v.sort_order || 0,
      };
      if (session.account.is_editor) body.enabled = enabled.checked;
      const local = checkTemplate(body);
      showErrors(local);
      if (Object.keys(local).length) return;
      try {
        await api(editing ? 'PUT' : 'POST', editing ? `/api/profile/templates/${id}` : '/api/profile/templates', body);
      } catch (e2) {
        if (e2.status !== 400) throw e2;
        const { fields, rest } = templateFieldErrors(e2.message, type.value);
        showErrors(fields);
        if (rest) throw new Error(rest);
        return;
      }
      go('/templates');
    });
  } },
  err,
  field('Title', title, null, errs.title),
  field('Image', image, 'From the image catalog.', errs.image),
  field('Instance type', type, null, errs.instance_type),
  field('App port', port, 'Only routed ports are reachable through the instance proxy.', errs.app_port),
  field('Start command', command, 'Required for vllm and sglang. The routed port is in $PORT.', errs.start_command),
  field('Description', description, null, errs.description),
  field('SSH access', ssh, 'Cannot be added to a running instance.'), sshNote,
  field('Persistent storage', persistent, 'Files survive destroy and relaunch only with this on.'),
  field('Disk size (GB)', disk, '100 to 200: up to 100 GB for 1 GPU, 150 for 2, 200 for 4.', errs.disk_gb),
  session.account.is_editor ? field('Publish publicly', enabled) : null,
  h('div', { class: 'row' }, submit, h('a', { href: '/templates' }, 'Cancel')));
  page(editing ? 'Edit template' : 'New template', form);
}

/** "12 h 30 min", "45 min", "under 1 min": how long a balance lasts. */
function fmtHours(h) {
  if (h === null) return 'unlimited (free)';
  const min = Math.floor(h * 60);
  if (min < 1) return 'under 1 min';
  const hrs = Math.floor(min / 60);
  return hrs ? `${hrs.toLocaleString()} h${min % 60 ? ` ${min % 60} min` : ''}` : `${min} min`;
}

const fmtWindow = (sec) => (sec % 3600 === 0 ? (sec === 3600 ? 'hour' : `${sec / 3600} hours`) : sec % 60 === 0 ? (sec === 60 ? 'minute' : `${sec / 60} minutes`) : `${sec} seconds`);

/** The launch rate windows as one sentence, and a warning once a window is used up (GET /api/launch-quote). */
function launchRateNote(rate) {
  const parts = rate.windows.map((w) => `${w.remaining} of ${w.max} per ${fmtWindow(w.seconds)}`);
  const text = `Launches left: ${parts.join(', ')}.`;
  if (!rate.retry_after_seconds) return h('p', { class: 'hint', id: 'launch-rate' }, text);
  const min = Math.ceil(rate.retry_after_seconds / 60);
  return h('p', { class: 'notice', id: 'launch-rate' }, `${text} The next launch is possible in ${rate.retry_after_seconds < 60 ? `${rate.retry_after_seconds} s` : `about ${min} min`}.`);
}

/** One GPU-count choice: price per hour, how long the balance lasts, free hosts of that size. */
function gpuOption(o, balance, checked) {
  const plural = o.gpu_count > 1 ? 's' : '';
  const room = o.hosts_with_room ? `free now on ${o.hosts_with_room} host${o.hosts_with_room > 1 ? 's' : ''}` : 'no host free now: waits in the queue';
  const lasts = o.affordable ? `your balance lasts ${fmtHours(o.hours_affordable)}` : `needs a balance of ${fmtCredits(o.min_balance)} (you have ${fmtCredits(balance)})`;
  const input = h('input', { type: 'radio', name: 'gpu_count', value: String(o.gpu_count), checked, 'aria-describedby': `gpu-${o.gpu_count}-d` });
  return h('label', { class: 'option' }, input,
    h('span', {}, h('strong', {}, `${o.gpu_count} GPU${plural}`), ` · ${fmtCredits(o.credits_per_hour)} credits per hour`,
      h('span', { class: 'hint', id: `gpu-${o.gpu_count}-d` }, `${lasts}; ${room}.`)));
}

/** "Insufficient credits" with the figures and the way to Credits. */
function insufficientCredits(box, quote, gpus) {
  box.replaceChildren(`Insufficient credits: ${gpus} GPU${gpus > 1 ? 's need' : ' needs'} a balance of at least ${fmtCredits(gpus)} credits and you have ${fmtCredits(quote.balance)}. `,
    h('a', { href: '/credits' }, 'Add credits'), '.');
}

async function launchPage(id) {
  page('Launch', h('p', { class: 'muted' }, 'Loading…'));
  const [{ templates }, quote, me] = await Promise.all([api('GET', '/api/templates'), api('GET', '/api/launch-quote'), api('GET', '/api/me')]);
  const t = templates.find((x) => String(x.id) === id);
  if (!t) return page('Launch', h('p', { class: 'alert' }, 'Template not found.'), h('a', { href: '/templates' }, 'Back to templates'));
  const err = alertBox();
  const first = quote.options.find((o) => o.affordable) || quote.options[0];
  const radios = quote.options.map((o) => gpuOption(o, quote.balance, o === first));
  const submit = h('button', { type: 'submit' }, 'Launch');
  const cap = quote.capacity;
  const form = h('form', { class: 'card', onsubmit: (e) => {
    e.preventDefault();
    const gpu_count = Number(form.querySelector('input[name=gpu_count]:checked').value);
    act(submit, err, async () => {
      try {
        await api('POST', `/api/templates/${t.id}/launch`, { gpu_count });
      } catch (e2) {
        if (e2.status === 400 && e2.message === 'Insufficient credits') return insufficientCredits(err, await api('GET', '/api/launch-quote'), gpu_count);
        // Launch verification: this browser session may get a single-use token, then retry once.
        if (e2.status !== 403 || !/launch verification/i.test(e2.message)) throw e2;
        const { launch_verification_token } = await api('POST', '/api/profile/launch-verification-token', {});
        await api('POST', `/api/templates/${t.id}/launch`, { gpu_count, launch_verification_token });
      }
      go('/instance');
    });
  } },
  err,
  h('dl', { class: 'facts' }, h('dt', {}, 'Image'), h('dd', {}, t.image), h('dt', {}, 'Type'), h('dd', {}, t.instance_type),
    h('dt', {}, 'Disk'), h('dd', {}, `${t.disk_gb} GB${t.persistent_storage ? ', persistent' : ''}`),
    h('dt', {}, 'Balance'), h('dd', { id: 'balance' }, `${fmtCredits(quote.balance)} credits · `, h('a', { href: '/credits' }, 'Credits')),
    h('dt', {}, 'Free GPUs'), h('dd', { id: 'capacity' }, `${cap.free_gpus}${cap.gpu_model ? ` × ${cap.gpu_model}` : ''} (at most ${cap.largest_free} on one host)`,
      cap.queued ? `; ${cap.queued} launch${cap.queued > 1 ? 'es' : ''} waiting` : '')),
  t.ssh_enabled && !t.image_ssh ? h('p', { class: 'warning', id: 'ssh-key-note' }, `This template has SSH on, but its image ${t.image} runs no SSH server: the instance will have no SSH.`,
    t.owned ? [' Pick an image that serves SSH in ', h('a', { href: `/templates/${t.id}/edit` }, 'the template'), '.'] : '') : null,
  t.ssh_enabled && t.image_ssh && !me.ssh_public_key ? h('p', { class: 'warning', id: 'ssh-key-note' }, 'This template has SSH on but no SSH key is saved: add one on ', h('a', { href: '/account' }, 'Account'), ' first, or nobody can log in.') : null,
  h('fieldset', {}, h('legend', {}, 'GPUs'), radios),
  h('p', { class: 'hint' }, `Credits are spent per GPU-hour (${fmtCredits(quote.credits_per_gpu_hour)} per GPU) while the instance exists, idle or not.`),
  launchRateNote(quote.launch_rate),
  submit);
  page(`Launch ${t.title}`, form);
}

// -- the instance

/** "2 min 05 s", "1 h 03 min": time since `iso`. */
function fmtElapsed(iso) {
  const s = Math.max(0, Math.floor((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

/** The stage of a pending instance, from where it is, its progress and its agent's message. */
function launchStage(st) {
  if (st.queue_position || !st.placed_at) return 'waiting for free GPUs';
  const p = st.progress;
  if (p && p.stage === 'image_build') return `building the image: step ${p.done} of ${p.total}`;
  if (p && p.stage === 'image_pull') return `pulling the image: ${p.done} of ${p.total} layers`;
  const m = st.message || '';
  if (/build/i.test(m)) return 'building the image';
  if (/pull|layers/i.test(m)) return 'pulling the image';
  if (/weight|download|model/i.test(m)) return 'loading the weights';
  if (/port|health|ready|start/i.test(m)) return 'starting: waiting for the app to answer on its port';
  return m || 'starting';
}

/**
 * SSH while the instance lives: the command where the image serves SSH and a key was saved at
 * launch; otherwise which of the two is missing (status ssh_missing), with the way to fix it.
 */
function sshFact(st, hasKey, fact) {
  const relaunch = ', then launch again (SSH is set when an instance launches).';
  if (st.ssh) return fact('SSH', h('code', { id: 'ssh' }, `ssh -p ${st.ssh.port} root@${st.ssh.host}`));
  if (st.ssh_missing === 'image') {
    return fact('SSH', h('span', { id: 'ssh' }, `Not offered: the image ${st.image} runs no SSH server. Pick an image that serves SSH in `,
      st.template_id ? h('a', { href: `/templates/${st.template_id}/edit` }, 'the template') : 'the template', relaunch));
  }
  // Saved at launch or not: a key saved since applies to the next launch only.
  if (st.ssh_missing === 'key' || (st.ssh_missing === null && hasKey === false)) {
    return fact('SSH', h('span', { id: 'ssh' }, 'Not offered: no SSH key was saved when it launched. Add one on ', h('a', { href: '/account' }, 'Account'), relaunch));
  }
  return null;
}

/** The instance's tunnels, live (status `tunnels`), and the one line that opens one from inside. */
function tunnelsBlock(st) {
  const list = st.tunnels || [];
  const example = `rc-tunnel expose --port 8080 --detach`;
  return h('section', { id: 'tunnels', 'aria-labelledby': 'tunnels-h' },
    h('h3', { id: 'tunnels-h' }, 'Tunnels'),
    list.length
      ? h('ul', { class: 'tunnels', 'aria-label': 'Open tunnels' }, list.map((t) => h('li', {},
        h('a', { href: t.public_url, target: '_blank', rel: 'noopener noreferrer' }, t.public_url), h('span', { class: 'hint' }, ` → port ${t.port} in the instance`))))
      : h('p', { class: 'muted' }, 'No tunnel is open.'),
    h('p', { class: 'hint' }, 'To open one, run inside the instance (its terminal, SSH or the start command); the URL appears here. Anyone with the URL reaches the service: put authentication in front of it.'),
    snippet(example, 'Open a tunnel'));
}

function instancePage() {
  const err = alertBox();
  // Whether the account has an SSH key (the command needs one): read once, the Account page changes it.
  let hasKey = null;
  api('GET', '/api/me').then((me) => { hasKey = Boolean(me.ssh_public_key); if (current) render(current); }).catch(() => {});
  const statusBox = h('section', { class: 'card', 'aria-labelledby': 'st-h' }, h('p', { class: 'muted' }, 'Connecting…'));
  const logs = h('pre', { id: 'logs', role: 'log', 'aria-label': 'Instance logs', tabindex: '0', 'data-empty': 'No logs: no instance yet.' });
  const logsNote = h('p', { class: 'hint', 'aria-live': 'polite' });
  // Its GPUs' utilization and memory, live, with their recent history (gpus.js, loaded on demand).
  const gpuBox = h('section', { class: 'card', 'aria-labelledby': 'gpu-h', hidden: true });
  let gpus = null;
  import('/console/gpus.js').then((m) => { gpus = m.instanceGpus(gpuBox); if (current) gpus.status(current); }).catch(() => {});
  page('Instance', err, statusBox, gpuBox, h('h2', {}, 'Logs'), logsNote, logs);

  let current = null;
  let received = 0;
  let logStream = null;
  let logsFor = null;

  function followLogs(id) {
    if (logStream) logStream.close();
    logsFor = id;
    logs.textContent = '';
    logs.dataset.empty = 'No log lines yet: the instance has written nothing so far.';
    logsNote.textContent = 'Following…';
    logStream = new EventSource('/api/notebook/logs?tail=200&follow=1');
    logStream.addEventListener('log', (e) => {
      const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
      delete logs.dataset.empty;
      logs.append(e.data + '\n');
      if (atEnd) logs.scrollTop = logs.scrollHeight;
    });
    logStream.addEventListener('end', (e) => {
      if (logs.dataset.empty) logs.dataset.empty = 'The instance wrote no log lines.';
      logsNote.textContent = `Instance ${JSON.parse(e.data).status}; end of logs.`;
      logStream.close();
    });
    logStream.addEventListener('stream_error', (e) => { logsNote.textContent = JSON.parse(e.data).detail; logStream.close(); });
  }

  function spentNow() {
    if (!current) return 0;
    // Billing starts when the instance is ready (views.ts: spent counts from ready_at), not at placement.
    const live = current.status === 'ready' && current.ready_at && !current.ended_at;
    return current.credits_spent + (live ? ((Date.now() - received) / 3600000) * current.credits_per_hour : 0);
  }

  function render(st) {
    if (!st) {
      statusBox.replaceChildren(h('h2', { id: 'st-h' }, 'No instance yet'), h('p', {}, 'Launch one from ', h('a', { href: '/templates' }, 'a template'), '.'));
      return;
    }
    const live = st.status === 'pending' || st.status === 'ready';
    const facts = [];
    const fact = (k, ...v) => facts.push(h('dt', {}, k), h('dd', {}, v));
    // The agent's raw message, unless the stage below says it better (image build or pull progress).
    fact('Status', h('span', { id: 'status', class: `badge s-${st.status}` }, st.status), st.message !== st.status && !st.progress ? ` ${st.message}` : '');
    // A launch's stage and how long it has taken so far (ticks every second; see the timer below).
    if (st.status === 'pending') fact('Launching', h('span', { id: 'stage' }, launchStage(st)), ' · ', h('span', { id: 'elapsed', 'data-since': st.created_at }, fmtElapsed(st.created_at)), ' so far');
    if (st.queue_position) fact('Queue', `position ${st.queue_position} (waiting for free GPUs)`);
    const p = st.status === 'pending' && st.progress;
    if (p) fact(p.stage === 'image_build' ? 'Building' : 'Pulling', h('progress', { id: 'image-progress', value: p.done, max: p.total, 'aria-label': p.stage === 'image_build' ? 'Image build steps' : 'Image layers pulled' }),
      p.stage === 'image_build' ? ` step ${p.done} of ${p.total}` : ` ${p.done} of ${p.total} layers`);
    if (st.reason) fact('Reason', h('code', {}, st.reason));
    if (st.detail) fact('Detail', st.detail);
    fact('Template', st.template_title, ` · ${st.instance_type} · ${st.gpu_count} GPU${st.gpu_count > 1 ? 's' : ''} · ${st.disk_gb} GB`);
    // The app has an origin of its own: this same-origin route hands the session over (a single-use ticket).
    if (live) fact('Open', st.status === 'ready' ? h('a', { id: 'open-app', href: `/api/instances/${encodeURIComponent(st.instance_id)}/open`, target: '_blank', rel: 'noopener' }, 'Open the app (new tab)') : h('span', { class: 'muted' }, 'when ready'));
    fact('Credits', h('span', { id: 'spent' }, fmtCredits(spentNow())), ` spent · ${fmtCredits(st.credits_per_hour)} per hour`);
    if (live && st.expires_at) fact('Lifetime ends', fmtTime(st.expires_at), ` (${fmtIn(st.expires_at)})`);
    if (live && st.idle_expires_at) fact('Idle stop', fmtTime(st.idle_expires_at), ` (${fmtIn(st.idle_expires_at)}, unless used)`);
    if (live) sshFact(st, hasKey, fact);
    const parts = [h('h2', { id: 'st-h' }, st.template_title), h('dl', { class: 'facts' }, facts)];
    if (live) parts.push(tunnelsBlock(st));
    if (st.dedicated_base_url) {
      parts.push(h('h3', {}, 'Dedicated endpoint'), snippet(
        `from openai import OpenAI\nclient = OpenAI(base_url="${st.dedicated_base_url}", api_key="YOUR_API_KEY")\n` +
        `print(client.chat.completions.create(model="${st.served_model || 'THE_SERVED_MODEL_NAME'}", messages=[{"role": "user", "content": "hi"}]))`, 'Dedicated endpoint client'),
        st.served_model ? null : h('p', { class: 'hint' }, 'The model name could not be read from the start command: use the name your server was started with (its --served-model-name).'));
    }
    if (live) {
      const destroy = h('button', { type: 'button', class: 'danger', onclick: async () => {
        if (!(await confirmDialog('Destroy instance?', 'It stops now and billing stops. Files not on persistent storage are deleted.', 'Destroy', true))) return;
        act(destroy, err, () => api('DELETE', '/api/notebook/current'));
      } }, 'Destroy');
      parts.push(h('div', { class: 'row' }, destroy));
    } else {
      parts.push(h('p', {}, h('a', { href: st.template_id ? `/launch/${st.template_id}` : '/templates' }, 'Launch again')));
    }
    statusBox.replaceChildren(...parts);
  }

  const events = new EventSource('/api/notebook/events');
  events.addEventListener('status', (e) => {
    current = JSON.parse(e.data);
    received = Date.now();
    render(current);
    gpus?.status(current);
    if (current && current.instance_id !== logsFor) followLogs(current.instance_id);
    else if (current && logStream && logStream.readyState === EventSource.CLOSED && (current.status === 'pending' || current.status === 'ready')) followLogs(current.instance_id);
  });
  events.addEventListener('gpus', (e) => gpus?.sample(JSON.parse(e.data)));
  events.addEventListener('error', () => { if (events.readyState === EventSource.CLOSED) err.textContent = 'Lost the status stream; reload the page.'; });
  const tick = setInterval(() => {
    const el = document.getElementById('spent');
    if (el) el.textContent = fmtCredits(spentNow());
    const since = document.getElementById('elapsed');
    if (since) since.textContent = fmtElapsed(since.dataset.since);
  }, 1000);
  cleanups.push(() => events.close(), () => logStream && logStream.close(), () => clearInterval(tick));
}

// -- credits

async function creditsPage() {
  const err = alertBox();
  const balance = h('strong', { id: 'balance' }, '…');
  const coupon = h('input', { name: 'coupon', autocomplete: 'off', required: true, spellcheck: 'false' });
  const redeem = h('button', { type: 'submit' }, 'Redeem');
  const result = h('p', { role: 'status' });
  const tbody = h('tbody');
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Older entries');
  let before = null;
  // An instance's entries name its template (and GPUs), the instance id stays for support.
  const ledgerRef = (ref, instances) => {
    const i = ref && instances && instances[ref];
    return i ? [h('span', {}, `${i.template_title} · ${i.gpu_count} GPU${i.gpu_count > 1 ? 's' : ''} `), h('span', { class: 'hint' }, ref)] : ref || '';
  };
  async function refreshBalance() { balance.textContent = fmtCredits((await api('GET', '/api/me')).credits); }
  async function loadLedger(reset) {
    if (reset) { tbody.replaceChildren(); before = null; }
    const q = before ? `?limit=25&before=${before}` : '?limit=25';
    const pageData = await api('GET', `/api/credits/ledger${q}`);
    for (const e of pageData.entries) {
      tbody.append(h('tr', {}, h('td', { 'data-label': 'When' }, fmtTime(e.created_at)), h('td', { 'data-label': 'Kind' }, e.kind.replace('_', ' ')),
        h('td', { 'data-label': 'Reference' }, ledgerRef(e.ref, pageData.instances)), h('td', { class: 'num', 'data-label': 'Credits' }, (e.credits > 0 ? '+' : '') + fmtCredits(e.credits))));
    }
    before = pageData.next_before;
    more.hidden = before === null;
  }
  more.onclick = () => act(more, err, () => loadLedger(false));
  const form = h('form', { class: 'card', onsubmit: (e) => {
    e.preventDefault();
    result.textContent = '';
    act(redeem, err, async () => {
      const r = await api('POST', '/api/credits/redeem', { coupon: coupon.value });
      result.textContent = `Added ${fmtCredits(r.credits_added)} credits.`;
      coupon.value = '';
      balance.textContent = fmtCredits(r.credits);
      await loadLedger(true);
    });
  } }, field('Coupon code', coupon), redeem, result);
  page('Credits', err,
    h('p', { class: 'card' }, 'Balance: ', balance, ' credits', h('span', { class: 'hint' }, ' (live: includes what a running instance has used so far)')),
    h('h2', {}, 'Redeem a coupon'), form,
    h('h2', {}, 'Ledger'),
    h('div', { class: 'table' }, h('table', { class: 'stack' }, h('thead', {}, h('tr', {}, ['When', 'Kind', 'Reference', 'Credits'].map((c, i) => h('th', { scope: 'col', class: i === 3 ? 'num' : null }, c)))), tbody)),
    more);
  await Promise.all([refreshBalance(), loadLedger(true)]);
  const t = setInterval(() => refreshBalance().catch(() => {}), 10000);
  cleanups.push(() => clearInterval(t));
}

// -- model APIs

/** Model colours of the hourly chart (each at least 3:1 against white). */
export const MODEL_COLOURS = ['#0b5cad', '#b35c00', '#126b2f', '#7b3fa0', '#b3261e', '#44505c'];
export const compact = (n) => n.toLocaleString(undefined, { notation: 'compact', maximumFractionDigits: 1 });
export const hh = (hour) => `${String(hour).padStart(2, '0')}:00`;

/** SVG element (the console's h() makes HTML ones). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return append(el, children);
}

/**
 * Today's tokens by UTC hour, stacked by model (usage.by_hour): an inline SVG with a summary as
 * its accessible name, a legend, and the figures as a table for screen readers.
 */
export function hourChart(byHour) {
  const models = [...new Set(byHour.flatMap((hr) => Object.keys(hr.by_model)))].sort();
  const colour = (m) => MODEL_COLOURS[models.indexOf(m) % MODEL_COLOURS.length];
  const max = Math.max(1, ...byHour.map((hr) => hr.tokens));
  const used = byHour.filter((hr) => hr.requests > 0);
  const peak = used.reduce((a, b) => (b.tokens > a.tokens ? b : a), used[0]);
  // Plot: 24 columns of 10 units from x=28; bars grow up from y=100 to at most y=8.
  const bars = byHour.flatMap((hr) => {
    let y = 100;
    return Object.entries(hr.by_model).map(([m, u]) => {
      const height = (92 * u.tokens) / max;
      y -= height;
      return svg('rect', { x: 29 + hr.hour * 10, y, width: 8, height, fill: colour(m) }, svg('title', {}, `${hh(hr.hour)} ${m}: ${u.tokens.toLocaleString()} tokens, ${u.requests} requests`));
    });
  });
  const ticks = [0, 6, 12, 18].map((hour) => svg('text', { x: 28 + hour * 10, y: 113 }, hh(hour)));
  const label = `Tokens by hour today (UTC), by model: ${used.length} active hour${used.length === 1 ? '' : 's'}, peak ${peak.tokens.toLocaleString()} tokens at ${hh(peak.hour)}`;
  return h('figure', { class: 'hours' },
    svg('svg', { viewBox: '0 0 270 116', role: 'img', 'aria-label': label },
      svg('line', { x1: 28, y1: 8, x2: 270, y2: 8 }), svg('line', { x1: 28, y1: 100, x2: 270, y2: 100, class: 'axis' }),
      svg('text', { x: 25, y: 11, 'text-anchor': 'end' }, compact(max)), svg('text', { x: 25, y: 103, 'text-anchor': 'end' }, '0'), ticks, bars),
    h('figcaption', {}, h('ul', { class: 'legend' }, models.map((m) => h('li', {}, svg('svg', { viewBox: '0 0 10 10', 'aria-hidden': 'true' }, svg('rect', { width: 10, height: 10, fill: colour(m) })), m)))),
    h('table', { class: 'sr-only' }, h('caption', {}, 'Tokens and requests by hour today (UTC)'),
      h('thead', {}, h('tr', {}, ['Hour', 'Model', 'Tokens', 'Requests'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, used.flatMap((hr) => Object.entries(hr.by_model).map(([m, u]) => h('tr', {}, h('td', {}, hh(hr.hour)), h('td', {}, m), h('td', {}, u.tokens.toLocaleString()), h('td', {}, u.requests)))))));
}

/** Ready-to-paste settings for curl and the four coding agents the README lists (the settings its slow suite runs). */
function agentSnippets(openai, anthropic, key, model, names) {
  const models = JSON.stringify(Object.fromEntries(names.map((n) => [n, {}])));
  return [
    h('h3', {}, 'curl'),
    snippet(`curl ${openai}/chat/completions -H "Authorization: Bearer ${key}" \\\n  -H 'content-type: application/json' \\\n  -d '{"model":"${model}","messages":[{"role":"user","content":"hi"}]}'`, 'curl'),
    h('h3', {}, 'Claude Code'),
    snippet(`ANTHROPIC_BASE_URL=${anthropic} ANTHROPIC_API_KEY=${key} ANTHROPIC_MODEL=${model} claude`, 'Claude Code'),
    h('h3', {}, 'Qwen Code'),
    snippet(`OPENAI_BASE_URL=${openai} OPENAI_API_KEY=${key} OPENAI_MODEL=${model} qwen`, 'Qwen Code'),
    h('h3', {}, 'Codex CLI'),
    h('p', { class: 'hint' }, 'In ~/.codex/config.toml, then run it with the key in RC_API_KEY:'),
    snippet(`model_provider = "rc"\n[model_providers.rc]\nname = "rc"\nbase_url = "${openai}"\nenv_key = "RC_API_KEY"\nwire_api = "responses"`, 'Codex CLI configuration'),
    snippet(`RC_API_KEY=${key} codex -m ${model}`, 'Codex CLI'),
    h('h3', {}, 'opencode'),
    h('p', { class: 'hint' }, 'In ~/.config/opencode/opencode.json, then run it with the key in RC_API_KEY:'),
    snippet(`{ "provider": { "rc": { "npm": "@ai-sdk/openai-compatible",\n  "options": { "baseURL": "${openai}", "apiKey": "{env:RC_API_KEY}" },\n  "models": ${models} } } }`, 'opencode configuration'),
    snippet(`RC_API_KEY=${key} opencode --model rc/${model}`, 'opencode'),
  ];
}

/** A model's context window: the number (and whether the backend told it), or "unknown" said plainly. */
function modelContext(m) {
  if (m.context == null) return h('td', { class: 'num' }, 'unknown', h('span', { class: 'hint' }, ' (the backend does not say)'));
  return h('td', { class: 'num' }, `${m.context.toLocaleString()} tokens`, m.context_source === 'backend' ? h('span', { class: 'hint' }, ' (from the backend)') : '');
}

async function modelsPage() {
  page('Model APIs', h('p', { class: 'muted' }, 'Loading…'));
  const [cat, usage] = await Promise.all([api('GET', '/api/models'), api('GET', '/api/profile/model-usage')]);
  const key = session.account.api_token ? 'YOUR_API_KEY' : '(verified accounts get an API key)';
  const openai = cat.openai_base_url || '<gateway>/v1';
  const anthropic = cat.anthropic_base_url || '<gateway>/api';
  const first = cat.models[0] ? cat.models[0].name : 'MODEL';
  const pct = (n) => `${Math.min(100, (100 * n) / Math.max(1, usage.daily_cap)).toFixed(1)}%`;
  const byModel = Object.entries(usage.by_model || {});
  // Per-model bars against the busiest model today, not the daily cap (against 10 M they look empty).
  const busiest = Math.max(1, ...byModel.map(([, u]) => u.input_tokens + u.output_tokens));
  const share = (n) => `${((100 * n) / busiest).toFixed(1)}%`;
  const names = cat.models.map((m) => m.name);
  page('Model APIs',
    h('p', {}, 'Free shared models with a daily token cap, separate from credits.'),
    h('h2', {}, 'Today'),
    h('p', {}, `${usage.tokens_used.toLocaleString()} of ${usage.daily_cap.toLocaleString()} tokens used (${usage.requests} request${usage.requests === 1 ? '' : 's'}); resets ${fmtTime(usage.resets_at)}.`),
    h('div', { class: 'bar', role: 'meter', 'aria-label': 'Daily tokens used', 'aria-valuemin': '0', 'aria-valuemax': String(usage.daily_cap), 'aria-valuenow': String(usage.tokens_used) }, h('span', { 'data-w': pct(usage.tokens_used) })),
    usage.by_hour && usage.by_hour.some((hr) => hr.requests > 0) ? [h('h3', {}, 'By hour'), hourChart(usage.by_hour), h('h3', {}, 'By model')] : null,
    byModel.length ? h('div', { class: 'chart', role: 'list', 'aria-label': 'Tokens by model today' }, byModel.map(([m, u]) => [
      h('span', { role: 'listitem' }, m), h('div', { class: 'bar', 'aria-hidden': 'true' }, h('span', { 'data-w': share(u.input_tokens + u.output_tokens) })),
      h('span', { class: 'num' }, `${(u.input_tokens + u.output_tokens).toLocaleString()} tokens, ${u.requests} req.`)])) : h('p', { class: 'muted' }, 'No requests today.'),
    h('h2', {}, 'Catalog'),
    h('div', { class: 'table' }, h('table', {}, h('thead', {}, h('tr', {}, ['Model', 'Tools', 'Reasoning', 'Context'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, cat.models.map((m) => h('tr', {}, h('td', {}, h('code', {}, m.name)), h('td', {}, m.tools ? 'yes' : 'no'),
        h('td', {}, m.reasoning ? `yes${m.efforts.length ? ` (${m.efforts.join(', ')})` : ''}` : 'no'), modelContext(m)))))),
    h('h2', {}, 'Base URLs'),
    h('dl', { class: 'facts' }, h('dt', {}, 'Chat completions'), h('dd', {}, h('code', {}, openai)), h('dt', {}, 'Messages protocol'), h('dd', {}, h('code', {}, anthropic))),
    h('h3', {}, 'openai'),
    snippet(`from openai import OpenAI\nclient = OpenAI(base_url="${openai}", api_key="${key}")\nr = client.chat.completions.create(model="${first}", messages=[{"role": "user", "content": "hi"}])\nprint(r.choices[0].message.content)`, 'openai client'),
    h('h3', {}, 'Anthropic'),
    snippet(`from anthropic import Anthropic\nclient = Anthropic(base_url="${anthropic}", api_key="${key}")\nr = client.messages.create(model="${first}", max_tokens=256, messages=[{"role": "user", "content": "hi"}])\nprint(r.content[0].text)`, 'Anthropic client'),
    agentSnippets(openai, anthropic, key, first, names));
  // Widths set from script (the CSP allows no inline styles).
  for (const el of main.querySelectorAll('[data-w]')) el.style.width = el.dataset.w;
}

// -- account

async function accountPage() {
  const me = await api('GET', '/api/me');
  const err = alertBox();
  const keyBox = h('code', { id: 'api-key' }, me.api_token ? `${me.api_token.slice(0, 6)}…` : 'none (your account is under review)');
  let shown = false;
  const show = h('button', { type: 'button', class: 'secondary', hidden: !me.api_token, onclick: () => {
    shown = !shown;
    keyBox.textContent = shown ? me.api_token : `${me.api_token.slice(0, 6)}…`;
    show.textContent = shown ? 'Hide' : 'Show';
  } }, 'Show');
  const rotate = h('button', { type: 'button', class: 'danger', hidden: !me.verified, onclick: async () => {
    if (!(await confirmDialog('Rotate the API key?', 'A new key is issued and the old one stops working at once, everywhere it is used.', 'Rotate', true))) return;
    act(rotate, err, async () => {
      me.api_token = (await api('POST', '/api/profile/api-token', {})).api_token;
      shown = true;
      keyBox.textContent = me.api_token;
      show.textContent = 'Hide';
      show.hidden = false;
      rotated.textContent = 'New key issued; the old key no longer works.';
    });
  } }, 'Rotate key');
  const rotated = h('p', { role: 'status' });
  const ssh = h('textarea', { name: 'ssh_public_key', rows: '3', spellcheck: 'false' });
  ssh.value = me.ssh_public_key || '';
  const saveSsh = h('button', { type: 'submit' }, 'Save SSH key');
  const sshDone = h('p', { role: 'status' });
  const sshErr = alertBox();
  page('Account', err,
    h('dl', { class: 'facts card' }, h('dt', {}, 'E-mail'), h('dd', {}, me.email), h('dt', {}, 'Status'), h('dd', {}, me.verified ? 'verified' : 'under review'),
      h('dt', {}, 'Sign-in'), h('dd', {}, me.provider)),
    h('h2', {}, 'API key'),
    h('div', { class: 'card' }, h('p', { class: 'row' }, keyBox, show), h('p', { class: 'warning' }, 'Rotating issues a new key and revokes the old one immediately.'), rotate, rotated),
    h('h2', {}, 'SSH key'),
    h('form', { class: 'card', onsubmit: (e) => {
      e.preventDefault();
      sshDone.textContent = '';
      act(saveSsh, sshErr, async () => {
        const r = await api('POST', '/api/profile/ssh-key', { ssh_public_key: ssh.value });
        ssh.value = r.ssh_public_key || '';
        sshDone.textContent = r.ssh_public_key ? 'Saved; used by instances launched from now on.' : 'Removed.';
      });
    } }, sshErr, field('Public key', ssh, 'One line, e.g. ssh-ed25519 AAAA… Empty removes it. Applies to instances launched afterwards.'), saveSsh, sshDone));
}

// ---- routing ---------------------------------------------------------------------------------------

/** [pattern, page, needs: 'none' | 'signed-in' | 'verified'] */
const ROUTES = [
  [/^\/signin$/, () => authPage('signin'), 'none'],
  [/^\/signup$/, () => authPage('signup'), 'none'],
  [/^\/review$/, reviewPage, 'signed-in'],
  [/^\/templates$/, templatesPage, 'verified'],
  [/^\/templates\/new$/, () => templateFormPage(), 'verified'],
  [/^\/templates\/(\d+)\/edit$/, (m) => templateFormPage(m[1]), 'verified'],
  [/^\/launch\/(\d+)$/, (m) => launchPage(m[1]), 'verified'],
  [/^\/instance$/, instancePage, 'verified'],
  [/^\/credits$/, creditsPage, 'signed-in'],
  [/^\/models$/, modelsPage, 'signed-in'],
  [/^\/account$/, accountPage, 'signed-in'],
  [/^\/operator(\/.*)?$/, operatorPage, 'operator'],
];

/** The operator's pages, from their own module (tenants never load it). */
async function operatorPage() {
  const mod = await import('/console/operator.js');
  await mod.render(location.pathname);
}

export function go(path, replace) {
  if (replace) history.replaceState(null, '', path);
  else if (location.pathname !== path) history.pushState(null, '', path);
  render();
}

async function render() {
  for (const c of cleanups.splice(0)) c();
  const path = location.pathname;
  if (path === '/') return go(session.account ? (session.account.verified ? '/instance' : '/review') : '/signin', true);
  const found = ROUTES.find(([re]) => re.test(path));
  if (!found) return page('Not found', h('p', {}, 'No such page. ', h('a', { href: '/' }, 'Home')));
  const [re, fn, needs] = found;
  if (needs !== 'none' && !session.account) return go('/signin', true);
  if (needs === 'verified' && !session.account.verified) return go('/review', true);
  if (needs === 'operator' && !session.operator) return page('Not found', h('p', {}, 'No such page. ', h('a', { href: '/' }, 'Home')));
  for (const a of nav.querySelectorAll('a')) {
    const href = a.getAttribute('href');
    if (path.startsWith(href.startsWith('/operator/') ? '/operator' : href)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  try {
    await fn(re.exec(path));
  } catch (err) {
    if (!(err instanceof ApiError && (err.status === 401 || (err.status === 403 && err.detail && err.detail.code)))) {
      page('Something went wrong', h('p', { class: 'alert', role: 'alert' }, err.message));
    }
  }
}

// Same-origin links to console pages render without a page load.
document.addEventListener('click', (e) => {
  const a = e.target.closest('a');
  if (!a || a.target || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const url = new URL(a.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/api/') || url.pathname.startsWith('/console/')) return;
  e.preventDefault();
  go(url.pathname);
});
addEventListener('popstate', render);

(async function boot() {
  try {
    const res = await fetch('/api/auth/session', { credentials: 'same-origin', headers: { accept: 'application/json' } });
    setSession(res.ok ? await res.json() : null);
  } catch {
    setSession(null);
  }
  render();
})();
