// The operator's check of a shared model before it is saved (issue 42: `team-chat` pointed at a sim
// answered 404 "The model `team-chat` does not exist" and nothing had checked it). For each
// upstream, from the control plane:
//
// 1. the model listing, GET /v1/models: the server must answer it (else it is unreachable, or not
//    an OpenAI-compatible model server) and list the served name (the catalog entry's servedName,
//    else its name), which is what requests will carry as `model`;
// 2. a one-token completion (POST /v1/chat/completions, max_tokens 1) for that name: the server
//    must answer it with a completion. Tried only once the listing passed.
//
// Each result is a sentence for the operator, and says what to change. A model without upstreams
// is served by an embedded sim (npm start): nothing to check. `model.add` refuses to save a model
// whose check failed unless told to save it anyway (`unchecked: true`, the form's "Save anyway").
import type { ModelEntry } from '../lib/config.js';
import { oneTokenCompletion, readListing } from './model-server.js';

const LISTING_TIMEOUT_MS = 5_000;
/** A real model's first token may wait for a cold start or a queue. */
const COMPLETION_TIMEOUT_MS = 20_000;

export interface UpstreamCheck {
  url: string;
  /** The listing answered and named the served model. */
  listed: boolean;
  /** The one-token completion answered (false when it failed or was not tried). */
  completed: boolean;
  /** The context the listing reports for the served name, when it does. */
  context: number | null;
  /** What was checked and what came of it, one sentence per step. */
  sentences: string[];
}

export interface ModelCheck {
  ok: boolean;
  /** The name requests will carry to the upstreams. */
  served_name: string;
  upstreams: UpstreamCheck[];
  /** The whole result in sentences (what the form and a refused save show). */
  summary: string;
}

const MAX_NAMES_SHOWN = 8;

function namesOf(models: string[]): string {
  const shown = models.slice(0, MAX_NAMES_SHOWN).map((m) => `“${m}”`);
  return models.length > MAX_NAMES_SHOWN ? `${shown.join(', ')} and ${models.length - MAX_NAMES_SHOWN} more` : shown.join(', ');
}

async function checkUpstream(url: string, served: string): Promise<UpstreamCheck> {
  const out: UpstreamCheck = { url, listed: false, completed: false, context: null, sentences: [] };
  const listing = await readListing(url, served, LISTING_TIMEOUT_MS);
  if (listing.kind === 'unreachable') {
    out.sentences.push(`${url} could not be reached (${listing.error}): check the address and that the server runs and listens there.`);
    return out;
  }
  if (listing.kind === 'not-a-model-server') {
    out.sentences.push(
      `${url} answered GET /v1/models with ${listing.status === 200 ? 'something that is not a model list' : `status ${listing.status}`}` +
        `${listing.excerpt ? ` (“${listing.excerpt}”)` : ''}: it is not an OpenAI-compatible model server, or the URL's path is wrong.`,
    );
    return out;
  }
  if (!listing.models.includes(served)) {
    out.sentences.push(
      listing.models.length
        ? `${url} serves ${namesOf(listing.models)}, not “${served}”: set the served name to the one the server was started with.`
        : `${url} lists no models: the server has not loaded one yet.`,
    );
    return out;
  }
  out.listed = true;
  out.context = listing.context ?? null;
  const about = [listing.server, listing.context ? `context ${listing.context.toLocaleString('en')} tokens` : 'its context not given']
    .filter(Boolean)
    .join(', ');
  out.sentences.push(`${url} lists “${served}” (${about}).`);
  const completion = await oneTokenCompletion(url, served, COMPLETION_TIMEOUT_MS);
  if (completion.kind === 'answered') {
    out.completed = true;
    out.sentences.push(`A one-token completion for “${served}” answered in ${completion.ms} ms.`);
  } else if (completion.kind === 'unreachable') {
    out.sentences.push(`A one-token completion for “${served}” got no answer (${completion.error}).`);
  } else {
    out.sentences.push(`A one-token completion for “${served}” failed with status ${completion.status}: ${completion.message}`);
  }
  return out;
}

/** Checks every upstream of `entry` (at once); `ok` when each one lists the served name and completes. */
export async function checkModel(entry: Pick<ModelEntry, 'name' | 'servedName' | 'upstreams'>): Promise<ModelCheck> {
  const served = entry.servedName ?? entry.name;
  if (entry.upstreams.length === 0) {
    return { ok: true, served_name: served, upstreams: [], summary: 'No upstreams: an embedded sim serves this model under npm start (nothing to check).' };
  }
  const upstreams = await Promise.all(entry.upstreams.map((u) => checkUpstream(u, served)));
  const ok = upstreams.every((u) => u.listed && u.completed);
  const failed = upstreams.filter((u) => !(u.listed && u.completed)).length;
  const head = ok
    ? `Every upstream serves “${served}”.`
    : `${failed} of ${upstreams.length} upstream${upstreams.length > 1 ? 's' : ''} failed the check for “${served}”.`;
  return { ok, served_name: served, upstreams, summary: [head, ...upstreams.flatMap((u) => u.sentences)].join(' ') };
}
