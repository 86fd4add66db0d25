// The instance API's error replies: SPEC's exact messages where SPEC gives one, `{ detail }` bodies.
import { ApiError, badRequest, forbidden, notFound } from '../errors.js';

export const GPU_COUNT_INVALID = 'GPU count must be 1, 2, or 4';
export const ONE_ACTIVE_INSTANCE = 'Each user can only have one active instance';
export const INSUFFICIENT_CREDITS = 'Insufficient credits';
export const LAUNCH_VERIFICATION_REQUIRED =
  'Launch verification is enabled for this account: send launch_verification_token (from POST /api/profile/launch-verification-token)';
export const LAUNCH_TOKEN_INVALID = 'Invalid or expired launch verification token';
export const SESSION_REQUIRED = 'Launch verification tokens are issued to a browser session only, not to an API key';
export const NO_INSTANCE = 'No instance';
export const NO_ACTIVE_INSTANCE = 'No active instance';

export const gpuCountInvalid = () => badRequest(GPU_COUNT_INVALID, 'gpu_count_invalid');
export const oneActiveInstance = () => badRequest(ONE_ACTIVE_INSTANCE, 'instance_exists');
export const insufficientCredits = () => badRequest(INSUFFICIENT_CREDITS, 'insufficient_credits');
export const launchVerificationRequired = () => forbidden(LAUNCH_VERIFICATION_REQUIRED, 'launch_verification_required');
export const launchTokenInvalid = () => forbidden(LAUNCH_TOKEN_INVALID, 'launch_verification_invalid');
export const sessionRequired = () => forbidden(SESSION_REQUIRED, 'session_required');
export const noInstance = (detail = NO_INSTANCE) => notFound(detail);
export const diskTooLarge = (diskGb: number, ceiling: number, gpus: number) =>
  badRequest(`Disk size ${diskGb} GB exceeds the ${ceiling} GB ceiling for ${gpus} GPU${gpus === 1 ? '' : 's'}`, 'disk_too_large');

/** 429 with Retry-After (whole seconds, at least 1). */
export const launchRateLimited = (retryAfterSec: number) =>
  new ApiError(429, 'launch_rate_limited', `Too many launches; retry after ${retryAfterSec} seconds`, { 'retry-after': String(retryAfterSec) });
