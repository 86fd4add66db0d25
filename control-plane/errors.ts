// Errors of the platform API. Each maps to one HTTP reply with the SPEC's body shape
// `{ detail: string }` (or, for account_not_verified, a detail object carrying the code and
// the review page's redirect).
import { retryAfterSeconds } from '../lib/clock.js';
import { RcError } from '../lib/errors.js';

/** Where an unverified account is sent (the review page of the web app). */
export const REVIEW_REDIRECT = '/review';

export class ApiError extends RcError {
  readonly detail: string | Record<string, unknown>;
  readonly headers: Record<string, string> | undefined;
  constructor(status: number, code: string, detail: string | Record<string, unknown>, headers?: Record<string, string>) {
    super(code, typeof detail === 'string' ? detail : String(detail.message ?? code), status);
    this.detail = detail;
    this.headers = headers;
  }
}

export const badRequest = (detail: string, code = 'RC_ERR_BAD_REQUEST') => new ApiError(400, code, detail);
export const unauthorized = (detail: string) => new ApiError(401, 'RC_ERR_UNAUTHORIZED', detail);
export const forbidden = (detail: string, code = 'RC_ERR_FORBIDDEN') => new ApiError(403, code, detail);
export const notFound = (detail = 'Not Found') => new ApiError(404, 'RC_ERR_NOT_FOUND', detail);
export const conflict = (detail: string, code = 'RC_ERR_CONFLICT') => new ApiError(409, code, detail);
/** 429 with Retry-After (whole seconds of `waitMs`, at least 1). */
export const tooManyRequests = (detail: string, waitMs: number, code: string) =>
  new ApiError(429, code, detail, { 'retry-after': String(retryAfterSeconds(waitMs)) });
export const unavailable = (detail: string, retryAfterSec: number, code = 'RC_ERR_UNAVAILABLE') =>
  new ApiError(503, code, detail, { 'retry-after': String(retryAfterSec) });

/** 403 account_not_verified: `{ detail: { code, message, redirect } }`. */
export const accountNotVerified = () =>
  new ApiError(403, 'account_not_verified', {
    code: 'account_not_verified',
    message: 'Your account is under review; this needs a verified account',
    redirect: REVIEW_REDIRECT,
  });

export const INVALID_BEARER = 'Invalid bearer token';
export const NO_API_KEY = 'Unauthorized: No API key provided.';
export const INVALID_IMAGE = 'Invalid image selected';
