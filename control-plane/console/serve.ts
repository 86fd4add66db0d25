// The web console: static files served by the control plane on the platform API's origin, so
// the pages call the API with the session cookie and CSRF token, without CORS. Files are read
// and compressed once at start (no build step, nothing fetched at run time); every console
// path answers the one HTML page, whose script renders the page for its path.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { statusLine } from '../../lib/http.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { API_ERRORS } from '../errors.js';

/** Paths of the console's pages (client-side routes); each serves index.html. */
export const CONSOLE_PAGES = [
  '/',
  '/signin',
  '/signup',
  '/review',
  '/templates',
  '/templates/new',
  '/templates/:id/edit',
  '/launch/:id',
  '/instance',
  '/credits',
  '/models',
  '/account',
  // The operator's pages (operator.js; the script shows them to operators only).
  '/operator',
  '/operator/review',
  '/operator/accounts',
  '/operator/accounts/:id',
  '/operator/coupons',
  '/operator/hosts',
  '/operator/instances',
  '/operator/catalogs',
  '/operator/usage',
  '/operator/audit',
] as const;

/** Where the assets are served. */
export const ASSET_PREFIX = '/console/';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/** Scripts, styles and requests only from this origin; never framed (clickjacking). */
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; " +
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'same-origin',
  'x-frame-options': 'DENY',
};

interface Asset {
  type: string;
  etag: string;
  raw: Buffer;
  gzip: Buffer;
  br: Buffer;
}

/** The static directory: `control-plane/console/static` of the checkout (found from here, compiled or not). */
export function staticDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const candidate = join(dir, 'control-plane', 'console', 'static');
    if (existsSync(join(candidate, 'index.html'))) return candidate;
    dir = dirname(dir);
  }
  throw new Error('console: control-plane/console/static/index.html not found');
}

/** Reads and compresses every file of the static directory. */
export function loadAssets(dir = staticDir()): Map<string, Asset> {
  const out = new Map<string, Asset>();
  for (const name of readdirSync(dir)) {
    const type = TYPES[extname(name)];
    if (!type) continue;
    const raw = readFileSync(join(dir, name));
    out.set(name, {
      type,
      raw,
      gzip: gzipSync(raw, { level: 9 }),
      br: brotliCompressSync(raw),
      etag: `"${createHash('sha256').update(raw).digest('base64url').slice(0, 22)}"`,
    });
  }
  return out;
}

function serve(res: HttpResponse, req: HttpRequest, asset: Asset | undefined, status = 200): void {
  if (!asset) {
    const missing = API_ERRORS.notFound;
    res.writeStatus(statusLine(missing.status)).writeHeader('content-type', 'text/plain; charset=utf-8').end(missing.message);
    return;
  }
  const headers = { ...SECURITY_HEADERS, 'cache-control': 'no-cache', etag: asset.etag, vary: 'accept-encoding' };
  if (status === 200 && req.getHeader('if-none-match') === asset.etag) {
    res.writeStatus(statusLine(304));
    for (const k in headers) res.writeHeader(k, headers[k as keyof typeof headers]);
    res.endWithoutBody();
    return;
  }
  const accept = req.getHeader('accept-encoding');
  const [body, encoding] = /\bbr\b/.test(accept) ? [asset.br, 'br'] : /\bgzip\b/.test(accept) ? [asset.gzip, 'gzip'] : [asset.raw, ''];
  res.writeStatus(statusLine(status)).writeHeader('content-type', asset.type);
  if (encoding) res.writeHeader('content-encoding', encoding);
  for (const k in headers) res.writeHeader(k, headers[k as keyof typeof headers]);
  res.end(body);
}

/** Registers the console's pages and assets (GET and HEAD) on `app`, before the API's catch-all. */
export function registerConsole(app: TemplatedApp, assets = loadAssets()): void {
  const page = assets.get('index.html');
  for (const path of CONSOLE_PAGES) {
    app.get(path, (res, req) => serve(res, req, page));
  }
  app.get(`${ASSET_PREFIX}*`, (res, req) => serve(res, req, assets.get(req.getUrl().slice(ASSET_PREFIX.length))));
  // Any other page path a browser navigates to (it asks for HTML): the console's own "Not found"
  // page with a 404 (the script shows it). Everything else, API paths and clients that do not ask
  // for HTML (curl, SDKs, a mistyped /v1 base URL), yields to the API's catch-all: SPEC's JSON
  // `{detail}` 404 and its 405s stay as they are.
  app.get('/*', (res, req) => {
    const url = req.getUrl();
    if (url === '/api' || url.startsWith('/api/') || !req.getHeader('accept').includes('text/html')) {
      req.setYield(true);
      return;
    }
    serve(res, req, page, 404);
  });
}
