// A promise with a deadline: its outcome, or TIMED_OUT once the deadline passes first. The timer
// is cleared as soon as the promise settles, so a deadline never keeps a process alive by itself.
// In lib/ because the gates (a Redis answer), every part's shutdown (lib/cli.ts) and the tests'
// process harness bound their waits with it.

export const TIMED_OUT: unique symbol = Symbol('timed out');

/** `p`'s value (or its rejection), or TIMED_OUT if `ms` pass before it settles. */
export function within<T>(p: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => resolve(TIMED_OUT), ms);
    p.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}
