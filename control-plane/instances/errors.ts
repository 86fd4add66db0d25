// The instance API's failures under the names the instance service calls them by: each is the
// row of the control plane's error table (../errors.ts), where its status, codes and SPEC's exact
// message are declared.
import { API_ERRORS } from '../errors.js';

export const GPU_COUNT_INVALID = API_ERRORS.gpuCountInvalid.message;
export const ONE_ACTIVE_INSTANCE = API_ERRORS.oneActiveInstance.message;
export const INSUFFICIENT_CREDITS = API_ERRORS.insufficientCredits.message;
export const LAUNCH_VERIFICATION_REQUIRED = API_ERRORS.launchVerificationRequired.message;
export const LAUNCH_TOKEN_INVALID = API_ERRORS.launchTokenInvalid.message;
export const SESSION_REQUIRED = API_ERRORS.sessionRequired.message;
export const NO_INSTANCE = API_ERRORS.noInstance.message;
export const NO_ACTIVE_INSTANCE = API_ERRORS.noActiveInstance.message;

export const gpuCountInvalid = API_ERRORS.gpuCountInvalid;
/** 400: no host of the fleet (drained ones left out) has that many GPUs at all; names the largest that fits. */
export const gpuCountTooLarge = API_ERRORS.gpuCountTooLarge;
export const oneActiveInstance = API_ERRORS.oneActiveInstance;
export const insufficientCredits = API_ERRORS.insufficientCredits;
export const launchVerificationRequired = API_ERRORS.launchVerificationRequired;
export const launchTokenInvalid = API_ERRORS.launchTokenInvalid;
export const sessionRequired = API_ERRORS.sessionRequired;
/** 404: no instance to show (the account never launched), or none active to destroy. */
export const noInstance = (detail: typeof NO_INSTANCE | typeof NO_ACTIVE_INSTANCE = NO_INSTANCE) =>
  detail === NO_ACTIVE_INSTANCE ? API_ERRORS.noActiveInstance() : API_ERRORS.noInstance();
export const diskTooLarge = API_ERRORS.diskTooLarge;
/** 429 with Retry-After (whole seconds, at least 1). */
export const launchRateLimited = API_ERRORS.launchRateLimited;
