// How a failure of the platform API (and of its instance proxy) is declared and raised, in the
// spirit of fastify's createError: the error table (errors.ts) declares each failure once with
// `failure({...})`, and a throw site calls the entry (`throw API_ERRORS.couponInvalid()`). The
// raised ApiError keeps two vocabularies apart: `code` is the internal RC_ERR_* code (logs, the
// rc CLI), `publicCode` the stable snake_case code clients may branch on.
import { RcError } from '../lib/errors.js';

/** An internal code: what logs and the rc CLI show. */
export type InternalCode = `RC_ERR_${string}`;

/** The `detail` of a reply: SPEC's message, or for coded failures `{ code, message, ... }`. */
export type Detail = string | Readonly<Record<string, unknown>>;

export interface ApiErrorInit {
  code: InternalCode;
  status: number;
  publicCode?: string | undefined;
  message: string;
  /** The reply's `detail` when it is not the message itself. */
  detail?: Detail | undefined;
  headers?: Record<string, string> | undefined;
}

/** A failure the platform API answers with `{ detail }` (router.ts) and the instance proxy alike. */
export class ApiError extends RcError {
  /** The stable snake_case code clients may branch on, when the failure has one (`code` is the internal one). */
  readonly publicCode: string | undefined;
  readonly detail: Detail;
  readonly headers: Record<string, string> | undefined;
  constructor(init: ApiErrorInit) {
    super(init.code, init.message, init.status);
    this.publicCode = init.publicCode;
    this.detail = init.detail ?? init.message;
    this.headers = init.headers;
  }
}

/** A function of a failure's arguments (`never`: any parameter list fits; ArgsOf recovers it). */
type Of<R> = (...args: never) => R;

/** One row of the error table. */
export interface FailureSpec {
  readonly code: InternalCode;
  /** The status it answers with (for a relayed refusal, the one when the other side gave none). */
  readonly status: number;
  /** The public code, for failures that have one. */
  readonly publicCode?: string;
  /** The message (the reply's `detail`), or its builder from the throw site's arguments. */
  readonly message: string | Of<string>;
  /** Extra reply headers (Retry-After on every 429 and 503, Allow on a 405). */
  readonly headers?: Of<Record<string, string>>;
  /** The status from the arguments, for a refusal relayed from elsewhere (an app's WebSocket answer). */
  readonly statusOf?: Of<number>;
  /**
   * The reply's detail is the object `{ code: publicCode, message, ...coded }` instead of the
   * message: SPEC's coded bodies (account_not_verified and its redirect, the 409 of e-mail verification).
   */
  readonly coded?: Readonly<Record<string, unknown>>;
}

/** The throw site's arguments: those of whichever builder the row has (all of a row's builders take the same). */
type ArgsOf<S extends FailureSpec> = S['message'] extends (...a: infer A) => string
  ? A
  : S['headers'] extends (...a: infer A) => Record<string, string>
    ? A
    : S['statusOf'] extends (...a: infer A) => number
      ? A
      : [];

/** The row's fields, read back from a declared failure (tests, README checks, transitional helpers). */
interface Row<S extends FailureSpec> {
  readonly code: S['code'];
  readonly status: S['status'];
  readonly publicCode: S extends { publicCode: infer P } ? P : undefined;
  readonly message: S['message'];
}

/** A declared failure: call it with the row's arguments to get the error to throw. */
export type Failure<S extends FailureSpec> = ((...args: ArgsOf<S>) => ApiError) & Row<S>;

/** Any declared failure, whatever its arguments. */
export type AnyFailure = Of<ApiError> & {
  readonly code: InternalCode;
  readonly status: number;
  readonly publicCode: string | undefined;
  readonly message: string | Of<string>;
};

/** Declares a failure (one row of errors.ts). */
export function failure<const S extends FailureSpec>(spec: S): Failure<S> {
  // A coded body names the public code: a row without one is a mistake, caught when the table loads.
  if (spec.coded && !spec.publicCode) throw new TypeError(`${spec.code}: a coded failure needs a public code`);
  const build = (...args: ArgsOf<S>): ApiError => {
    const call = <R>(f: Of<R>): R => (f as (...a: ArgsOf<S>) => R)(...args);
    const message = typeof spec.message === 'string' ? spec.message : call(spec.message);
    return new ApiError({
      code: spec.code,
      status: spec.statusOf ? call(spec.statusOf) : spec.status,
      publicCode: spec.publicCode,
      message,
      detail: spec.coded ? { code: spec.publicCode, message, ...spec.coded } : message,
      headers: spec.headers && call(spec.headers),
    });
  };
  return Object.assign(build, { code: spec.code, status: spec.status, publicCode: spec.publicCode, message: spec.message }) as Failure<S>;
}

/** The failure's codes and status with another detail (for throw sites that word it themselves). */
export function withDetail(f: AnyFailure, detail: string): ApiError {
  return new ApiError({ code: f.code, status: f.status, publicCode: f.publicCode, message: detail });
}
