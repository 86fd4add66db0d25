// Instance states and the only transitions allowed between them. Every state change in the
// database goes through `allowedFrom`, so an UPDATE guarded by it cannot produce any other one.
//
//   pending ──> ready ──> stopping ──> stopped
//      │          │          ^
//      │          └──> failed│
//      ├──> failed           │
//      └─────────────────────┘   (pending -> stopping: destroyed before it was ready)
export const STATES = ['pending', 'ready', 'stopping', 'stopped', 'failed'] as const;
export type InstanceState = (typeof STATES)[number];

/** From-state -> the states it may move to. A state may also stay itself with a new message. */
export const TRANSITIONS: Readonly<Record<InstanceState, readonly InstanceState[]>> = {
  pending: ['ready', 'failed', 'stopping'],
  ready: ['failed', 'stopping'],
  stopping: ['stopped'],
  stopped: [],
  failed: [],
};

/** States that hold the account's single active slot (the unique index in the database). */
export const ACTIVE: readonly InstanceState[] = ['pending', 'ready'];
/** States in which an instance holds GPUs on its host. */
export const ON_HOST: readonly InstanceState[] = ['pending', 'ready', 'stopping'];
export const TERMINAL: readonly InstanceState[] = ['stopped', 'failed'];

export function canTransition(from: InstanceState, to: InstanceState): boolean {
  return TRANSITIONS[from].includes(to);
}

/** The states from which `to` may be reached (for a guarded UPDATE ... WHERE state IN (...)). */
export function allowedFrom(to: InstanceState): InstanceState[] {
  return STATES.filter((s) => canTransition(s, to));
}
