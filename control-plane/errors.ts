// Every failure of the control plane, declared once (fastify's lib/errors.js in spirit): the
// platform API, the instance endpoints and the instance proxy answer from this table. Each row
// gives the internal code (logs, the rc CLI), the HTTP status, the public snake_case code when
// the failure has one, and SPEC's message or its builder; throw sites call the row
// (`throw API_ERRORS.couponInvalid()`). Replies keep SPEC's body `{ detail }` (router.ts): the
// message, or for the coded failures the object `{ code, message, ... }`. control-plane/README.md
// "Error codes" lists the same rows; test/control-plane/error-codes.test.ts keeps them in step.
import { retryAfterSeconds } from '../lib/clock.js';
import { MAX_JSON_DEPTH } from '../lib/http.js';
import { ApiError, failure, type AnyFailure } from './api-error.js';

export { ApiError };

/** Where an unverified account is sent (the review page of the web app). */
export const REVIEW_REDIRECT = '/review';

/** Retry-After of a 429 from the wait of a limit (whole seconds, at least 1). */
const retryAfterWait = (waitMs: number) => ({ 'retry-after': String(retryAfterSeconds(waitMs)) });
/** Retry-After of a 503 or 429 given in whole seconds. */
const retryAfter = (seconds: number) => ({ 'retry-after': String(seconds) });
/** The two refusals of the per-address sign-up limit: a sign-up, and a verification mail asked again (the same bucket). */
type SignUpRequest = 'sign-ups' | 'requests';

export const API_ERRORS = {
  // Requests: paths, methods, bodies (router.ts).
  malformedPath: failure({ code: 'RC_ERR_MALFORMED_PATH', status: 400, message: 'Malformed percent-encoding in the URL path' }),
  notFound: failure({ code: 'RC_ERR_NOT_FOUND', status: 404, message: 'Not Found' }),
  methodNotAllowed: failure({ code: 'RC_ERR_METHOD_NOT_ALLOWED', status: 405, message: 'Method Not Allowed', headers: (allow: string) => ({ allow }) }),
  internal: failure({ code: 'RC_ERR_INTERNAL', status: 500, message: 'Internal server error' }),
  invalidJson: failure({ code: 'RC_ERR_INVALID_JSON', status: 400, message: 'Request body is not valid JSON' }),
  notAnObject: failure({ code: 'RC_ERR_NOT_AN_OBJECT', status: 400, message: 'Request body must be a JSON object' }),
  tooDeep: failure({ code: 'RC_ERR_TOO_DEEP', status: 400, message: `Request body nests deeper than ${MAX_JSON_DEPTH} levels` }),
  /** Input a route's zod schema refused; the message names the fields (validate.ts). */
  validation: failure({ code: 'RC_ERR_VALIDATION', status: 400, message: (issues: string) => issues }),
  /** An event stream past RC_API_STREAMS_PER_ACCOUNT or _PER_ADDRESS (router.ts; the message names which, lib/held-limits.ts). */
  streamLimit: failure({
    code: 'RC_ERR_STREAM_LIMIT',
    status: 429,
    publicCode: 'stream_limit_exceeded',
    message: (message: string, _retryAfterSec: number) => message,
    headers: (_message: string, retryAfterSec: number) => retryAfter(retryAfterSec),
  }),

  // Credentials (auth.ts, router.ts).
  noApiKey: failure({ code: 'RC_ERR_NO_API_KEY', status: 401, message: 'Unauthorized: No API key provided.' }),
  invalidBearer: failure({ code: 'RC_ERR_INVALID_BEARER', status: 401, message: 'Invalid bearer token' }),
  sessionInvalid: failure({ code: 'RC_ERR_SESSION_INVALID', status: 401, message: 'Session expired or invalid; sign in again' }),
  csrfInvalid: failure({
    code: 'RC_ERR_CSRF_INVALID',
    status: 403,
    publicCode: 'csrf_invalid',
    message: 'Missing or invalid CSRF token (send the x-csrf-token header given at sign-in)',
  }),
  /** An operator route (router access `operator`) called with a key: operators act with their browser session. */
  operatorSessionOnly: failure({
    code: 'RC_ERR_OPERATOR_SESSION_ONLY',
    status: 403,
    publicCode: 'operator_session_only',
    message: "Operator routes take an operator's browser session, not an API key",
  }),
  operatorOnly: failure({ code: 'RC_ERR_OPERATOR_ONLY', status: 403, publicCode: 'operator_only', message: 'Operator access only' }),
  adminTokenInvalid: failure({ code: 'RC_ERR_ADMIN_TOKEN_INVALID', status: 401, message: 'Invalid or missing admin token (x-rc-admin-token)' }),
  internalTokenInvalid: failure({ code: 'RC_ERR_INTERNAL_TOKEN_INVALID', status: 401, message: 'Invalid or missing internal token (x-rc-internal-token)' }),
  accountNotVerified: failure({
    code: 'RC_ERR_ACCOUNT_NOT_VERIFIED',
    status: 403,
    publicCode: 'account_not_verified',
    message: 'Your account is under review; this needs a verified account',
    coded: { redirect: REVIEW_REDIRECT },
  }),

  // Sign-up and sign-in (routes-auth.ts, routes-email.ts, auth/).
  signupClosed: failure({ code: 'RC_ERR_SIGNUP_CLOSED', status: 403, publicCode: 'signup_closed', message: 'Sign-up is closed' }),
  signupRateLimited: failure({
    code: 'RC_ERR_SIGNUP_RATE_LIMITED',
    status: 429,
    publicCode: 'signup_rate_limited',
    message: (_waitMs: number, what: SignUpRequest = 'sign-ups') => `Too many ${what} from this address; retry after the Retry-After delay`,
    headers: (waitMs: number) => retryAfterWait(waitMs),
  }),
  loginRateLimited: failure({
    code: 'RC_ERR_LOGIN_RATE_LIMITED',
    status: 429,
    publicCode: 'login_rate_limited',
    message: 'Too many sign-in attempts; retry after the Retry-After delay',
    headers: (waitMs: number) => retryAfterWait(waitMs),
  }),
  loginFailed: failure({ code: 'RC_ERR_LOGIN_FAILED', status: 401, message: 'Invalid e-mail or password' }),
  /** Sign-in of a disabled account (a rejected sign-up): told after the right password only. */
  accountDisabled: failure({
    code: 'RC_ERR_ACCOUNT_DISABLED',
    status: 403,
    publicCode: 'account_disabled',
    message: 'This account is disabled; contact the operator',
  }),
  emailTaken: failure({ code: 'RC_ERR_EMAIL_TAKEN', status: 409, publicCode: 'email_taken', message: 'An account with this e-mail already exists' }),
  notJson: failure({ code: 'RC_ERR_NOT_JSON', status: 415, publicCode: 'unsupported_media_type', message: 'Content-Type must be application/json' }),
  crossOrigin: failure({
    code: 'RC_ERR_CROSS_ORIGIN',
    status: 403,
    publicCode: 'cross_origin',
    message: "Cross-origin request refused: sign in from the platform's own pages",
  }),
  emailVerificationRequired: failure({
    code: 'RC_ERR_EMAIL_VERIFICATION_REQUIRED',
    status: 409,
    publicCode: 'email_verification_required',
    message: 'Verify your e-mail address first: open the link we sent you (or ask for a new one)',
    coded: {},
  }),
  verificationLinkInvalid: failure({
    code: 'RC_ERR_VERIFICATION_LINK_INVALID',
    status: 400,
    publicCode: 'verification_link_invalid',
    message: 'This verification link is invalid, expired or already used',
  }),

  // The account and its credits (routes-account.ts, ledger.ts).
  sshKeyInvalid: failure({
    code: 'RC_ERR_SSH_KEY_INVALID',
    status: 400,
    publicCode: 'ssh_key_invalid',
    message: (reason: string) => `Invalid SSH public key: ${reason}`,
  }),
  redemptionClosed: failure({
    code: 'RC_ERR_REDEMPTION_CLOSED',
    status: 503,
    publicCode: 'redemption_closed',
    message: 'Coupon redemption is closed; try again later',
    headers: (retryAfterSec: number) => retryAfter(retryAfterSec),
  }),
  couponInvalid: failure({ code: 'RC_ERR_COUPON_INVALID', status: 400, publicCode: 'coupon_invalid', message: 'Invalid coupon code' }),
  /** Told only to the account that redeemed it: to anyone else a redeemed code is couponInvalid. */
  couponRedeemed: failure({ code: 'RC_ERR_COUPON_REDEEMED', status: 400, publicCode: 'coupon_redeemed', message: 'Coupon has already been redeemed' }),
  couponRateLimited: failure({
    code: 'RC_ERR_COUPON_RATE_LIMITED',
    status: 429,
    publicCode: 'coupon_rate_limited',
    message: 'Too many coupon attempts; retry after the Retry-After delay',
    headers: (waitMs: number) => retryAfterWait(waitMs),
  }),
  couponExists: failure({ code: 'RC_ERR_COUPON_EXISTS', status: 400, publicCode: 'coupon_exists', message: (code: string) => `Coupon ${code} already exists` }),

  // Templates and the image catalog (routes-templates.ts, the launch).
  templateNotFound: failure({ code: 'RC_ERR_TEMPLATE_NOT_FOUND', status: 404, message: 'Template not found' }),
  invalidImage: failure({ code: 'RC_ERR_INVALID_IMAGE', status: 400, publicCode: 'invalid_image', message: 'Invalid image selected' }),

  // Operator actions (admin.ts, operator/, instances/fleet.ts).
  accountNotFound: failure({ code: 'RC_ERR_ACCOUNT_NOT_FOUND', status: 404, message: (email: string) => `No account with e-mail ${email}` }),
  imageNotFound: failure({ code: 'RC_ERR_IMAGE_NOT_FOUND', status: 404, message: (image: string) => `No image ${image} in the catalog` }),
  modelNotFound: failure({
    code: 'RC_ERR_MODEL_NOT_FOUND',
    status: 404,
    message: (name: string) => `No model ${name} in the database catalog (models from RC_CONFIG are edited there)`,
  }),
  /** model.add of a model whose upstreams failed the check (model-check.ts), without `unchecked`. */
  modelCheckFailed: failure({
    code: 'RC_ERR_MODEL_CHECK_FAILED',
    status: 400,
    publicCode: 'model_check_failed',
    message: (summary: string) => `${summary} Not saved: fix it, or save it anyway (unchecked: true; rc model add --unchecked).`,
  }),
  hostNotFound: failure({ code: 'RC_ERR_HOST_NOT_FOUND', status: 404, message: (name: string) => `No host named ${name}` }),
  adminOpUnknown: failure({ code: 'RC_ERR_ADMIN_OP_UNKNOWN', status: 404, message: (name: string) => `Unknown admin operation ${name}` }),
  /** GET /api/operator/accounts/{id} of an id no account has (operator/routes.ts). */
  accountIdNotFound: failure({ code: 'RC_ERR_ACCOUNT_ID_NOT_FOUND', status: 404, message: 'No such account' }),
  accountVerified: failure({
    code: 'RC_ERR_ACCOUNT_VERIFIED',
    status: 409,
    publicCode: 'account_verified',
    message: (email: string) => `Account ${email} is verified already; disable it instead`,
  }),
  noKeyAllowed: failure({
    code: 'RC_ERR_NO_KEY_ALLOWED',
    status: 409,
    publicCode: 'no_key_allowed',
    message: (email: string) => `Account ${email} is not verified or is disabled: it holds no key`,
  }),
  /** An action only the running control plane can do, asked of the CLI on the database (operator/). */
  needsRunningPlatform: failure({
    code: 'RC_ERR_NEEDS_RUNNING_PLATFORM',
    status: 409,
    publicCode: 'needs_running_platform',
    message: (action: 'coupon.redemption' | 'instance.destroy') =>
      action === 'coupon.redemption' ? 'Coupon redemption is switched on a running control plane' : 'Destroying an instance needs the running control plane',
  }),
  hostStatic: failure({
    code: 'RC_ERR_HOST_STATIC',
    status: 400,
    publicCode: 'host_static',
    message: (name: string, change: 'replaced' | 'removed') =>
      change === 'replaced'
        ? `Host ${name} is configured at start (the embedded agent) and cannot be replaced`
        : `Host ${name} is configured at start (the embedded agent); it cannot be removed`,
  }),
  hostBusy: failure({
    code: 'RC_ERR_HOST_BUSY',
    status: 409,
    publicCode: 'host_busy',
    /** `instanceIds` undefined: --force refused where nothing can end them (no running control plane). */
    message: (name: string, instanceIds: readonly string[] | undefined) =>
      instanceIds
        ? `Host ${name} still has ${instanceIds.length} instance(s) (${instanceIds.join(', ')}); drain it and wait for them to end, or remove it with --force`
        : `Host ${name} still has instances; --force needs the running control plane (it ends and bills them)`,
  }),

  // Instances (instances/errors.ts gives the launch rules' helpers).
  gpuCountInvalid: failure({ code: 'RC_ERR_GPU_COUNT_INVALID', status: 400, publicCode: 'gpu_count_invalid', message: 'GPU count must be 1, 2, or 4' }),
  gpuCountTooLarge: failure({
    code: 'RC_ERR_GPU_COUNT_TOO_LARGE',
    status: 400,
    publicCode: 'gpu_count_too_large',
    /** `fits`: the largest allowed gpu_count some host can hold (0: none). */
    message: (gpus: number, fits: number) =>
      fits
        ? `No host can hold ${gpus} GPUs; the largest launch that fits is ${fits} GPU${fits === 1 ? '' : 's'}`
        : `No host can hold ${gpus} GPUs; no host takes GPU launches`,
  }),
  oneActiveInstance: failure({
    code: 'RC_ERR_INSTANCE_EXISTS',
    status: 400,
    publicCode: 'instance_exists',
    message: 'Each user can only have one active instance',
  }),
  insufficientCredits: failure({ code: 'RC_ERR_INSUFFICIENT_CREDITS', status: 400, publicCode: 'insufficient_credits', message: 'Insufficient credits' }),
  diskTooLarge: failure({
    code: 'RC_ERR_DISK_TOO_LARGE',
    status: 400,
    publicCode: 'disk_too_large',
    message: (diskGb: number, ceiling: number, gpus: number) =>
      `Disk size ${diskGb} GB exceeds the ${ceiling} GB ceiling for ${gpus} GPU${gpus === 1 ? '' : 's'}`,
  }),
  launchVerificationRequired: failure({
    code: 'RC_ERR_LAUNCH_VERIFICATION_REQUIRED',
    status: 403,
    publicCode: 'launch_verification_required',
    message: 'Launch verification is enabled for this account: send launch_verification_token (from POST /api/profile/launch-verification-token)',
  }),
  launchTokenInvalid: failure({
    code: 'RC_ERR_LAUNCH_TOKEN_INVALID',
    status: 403,
    publicCode: 'launch_verification_invalid',
    message: 'Invalid or expired launch verification token',
  }),
  sessionRequired: failure({
    code: 'RC_ERR_SESSION_REQUIRED',
    status: 403,
    publicCode: 'session_required',
    message: 'Launch verification tokens are issued to a browser session only, not to an API key',
  }),
  launchRateLimited: failure({
    code: 'RC_ERR_LAUNCH_RATE_LIMITED',
    status: 429,
    publicCode: 'launch_rate_limited',
    message: (retryAfterSec: number) => `Too many launches; retry after ${retryAfterSec} seconds`,
    headers: (retryAfterSec: number) => retryAfter(retryAfterSec),
  }),
  noInstance: failure({ code: 'RC_ERR_NO_INSTANCE', status: 404, message: 'No instance' }),
  noActiveInstance: failure({ code: 'RC_ERR_NO_ACTIVE_INSTANCE', status: 404, message: 'No active instance' }),

  // Opening an instance's app, and the instance proxy (proxy/).
  instanceNoAccess: failure({ code: 'RC_ERR_INSTANCE_NO_ACCESS', status: 403, message: 'You do not have access to this instance' }),
  instanceNotRunning: failure({ code: 'RC_ERR_INSTANCE_NOT_RUNNING', status: 404, message: 'Instance not found or not running' }),
  instanceWithoutOrigin: failure({
    code: 'RC_ERR_INSTANCE_WITHOUT_ORIGIN',
    status: 404,
    message: 'This instance was launched before instances had origins of their own; destroy it and launch again to open it in the browser',
  }),
  instanceWithoutApp: failure({ code: 'RC_ERR_INSTANCE_WITHOUT_APP', status: 404, message: 'This instance has no app port' }),
  instanceStarting: failure({
    code: 'RC_ERR_INSTANCE_STARTING',
    status: 503,
    message: 'Instance is still starting; retry after the Retry-After delay',
    headers: (retryAfterSec: number) => retryAfter(retryAfterSec),
  }),
  instanceUnreachable: failure({ code: 'RC_ERR_INSTANCE_UNREACHABLE', status: 502, message: 'The instance is unreachable' }),
  /** The app answered the WebSocket handshake with a status of its own, which the browser gets. */
  instanceRefusedWebSocket: failure({
    code: 'RC_ERR_INSTANCE_REFUSED_WEBSOCKET',
    status: 502,
    message: (appStatus: number | undefined) => `The instance refused the WebSocket (HTTP ${appStatus})`,
    statusOf: (appStatus: number | undefined) => appStatus ?? 502,
  }),
  proxySignInRequired: failure({
    code: 'RC_ERR_PROXY_SIGN_IN_REQUIRED',
    status: 401,
    message: 'A browser session is required to open an instance: open it from the console',
  }),
  proxyTicketInvalid: failure({
    code: 'RC_ERR_PROXY_TICKET_INVALID',
    status: 401,
    message: 'This sign-in link is invalid, expired or used already: open the instance from the console again',
  }),
  proxyCrossSite: failure({
    code: 'RC_ERR_PROXY_CROSS_SITE',
    status: 403,
    message: 'Cross-site request refused: only navigations may come from another site',
  }),
  /** Past an instance proxy bound (RC_PROXY_INFLIGHT_*, RC_PROXY_UPLOAD_BYTES_*; proxy/limits.ts): the message names which. */
  proxyLimit: failure({
    code: 'RC_ERR_PROXY_LIMIT',
    status: 429,
    message: (message: string, _retryAfterSec: number) => message,
    headers: (_message: string, retryAfterSec: number) => retryAfter(retryAfterSec),
  }),
} satisfies Record<string, AnyFailure>;

export type ApiErrorName = keyof typeof API_ERRORS;

/**
 * Internal codes of the control plane's errors that are not replies (RcError classes), with
 * their class. control-plane/README.md "Internal error codes" lists the same.
 */
export const INTERNAL_ERROR_CODES = {
  RC_ERR_SCHEMA_TOO_NEW: 'SchemaTooNewError',
  RC_ERR_SMTP: 'SmtpError',
  RC_ERR_ADMIN_API: 'AdminApiError',
  RC_ERR_NO_PLATFORM: 'NoPlatformError',
  RC_ERR_SEAL_KEY_MISMATCH: 'SealKeyMismatchError',
  RC_ERR_LEASE_LOST: 'LeaseLostError',
} as const;
