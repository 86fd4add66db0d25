// The reasoning-effort rule shared by every route that takes an effort tier
// (/v1/messages output_config.effort, /v1/responses reasoning.effort).
//
// SPEC: effort controls reasoning depth "on models that support it". So:
// - a model without reasoning ignores the tier, whatever it is (no error, nothing sent);
// - on a reasoning model, `low` and `medium` plus the catalog entry's `efforts` are accepted and
//   sent as `reasoning_effort`; any other known tier is mapped to the nearest accepted one
//   (ties go to the lower tier), so a coding agent asking `high` or `max` by default still works;
// - on a reasoning model, a tier name we do not know at all is refused (400), naming the accepted ones.

/** Known tiers, least reasoning first. */
export const EFFORT_TIERS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;

/** Tiers every reasoning model accepts. */
export const BASE_EFFORTS: readonly string[] = ['low', 'medium'];

export type EffortResult = { kind: 'ignore' } | { kind: 'send'; effort: string } | { kind: 'refuse'; accepted: string[] };

const RANK = new Map<string, number>(EFFORT_TIERS.map((t, i) => [t, i]));

/** What to do with `effort` on a model: ignore it, send a (possibly mapped) tier, or refuse. */
export function resolveEffort(effort: string, model: { reasoning: boolean; efforts: readonly string[] }): EffortResult {
  if (!model.reasoning) return { kind: 'ignore' };
  const accepted = [...BASE_EFFORTS, ...model.efforts.filter((e) => !BASE_EFFORTS.includes(e))];
  if (accepted.includes(effort)) return { kind: 'send', effort };
  const rank = RANK.get(effort);
  if (rank === undefined) return { kind: 'refuse', accepted };
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const a of accepted) {
    const r = RANK.get(a);
    if (r === undefined) continue; // a custom tier in the catalog: only sent when asked by name
    const d = Math.abs(r - rank);
    if (d < bestDistance || (d === bestDistance && r < RANK.get(best!)!)) {
      best = a;
      bestDistance = d;
    }
  }
  return best === undefined ? { kind: 'refuse', accepted } : { kind: 'send', effort: best };
}
