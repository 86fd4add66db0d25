// What a request tells the upstream choice (router.ts): its user id, and for a model routed by
// prefix its prefix units (prefix-key.ts) and its conversation key. Routes build it from what
// they parsed (chatRouteHint, responsesRouteHint) and pass it where a sticky key went before; a
// plain string still means a sticky user key.
import { fnv1a, prefixUnits } from './prefix-key.js';
import type { ModelRouter } from './router.js';

export interface RouteHint {
  /** The client's user id (chat `user`, messages `metadata.user_id`...): the sticky key of 'least-loaded'. */
  readonly user: string | undefined;
  /**
   * The conversation key, the same on every turn and every gateway replica: the user id's hash when
   * there is one, else the unit of the conversation's first non-system message.
   */
  readonly key: number;
  /** Chained prefix hashes: units[k] covers the first k + 1 units of the prompt. */
  readonly units: Uint32Array;
  /**
   * The shortest match that counts. Without a user id, the conversation's own first message: a
   * system prompt shared by many conversations alone would herd them onto one backend. With one,
   * 0: the units are chained from the user id, so they are that user's own.
   */
  readonly minUnit: number;
}

/** What routing needs of a model (a ModelState). */
export interface RoutedModel {
  readonly router: ModelRouter | undefined;
}

/** What routing reads of a chat-completions request (the parsed body). */
export interface ChatRouteFields {
  readonly messages?: unknown;
  readonly tools?: unknown;
}

/**
 * The route of a chat-completions request (also the messages protocol's translated one):
 * `user` is the sticky user key the route has (chat `user`, messages `metadata.user_id`). For a
 * model not routed by prefix (one backend, 'least-loaded', 'round-robin') this is `user` itself:
 * nothing is hashed or allocated.
 */
export function chatRouteHint(model: RoutedModel, chat: ChatRouteFields, user: string | undefined): RouteHint | string | undefined {
  if (model.router?.policy !== 'prefix') return user;
  const messages = chat.messages;
  return Array.isArray(messages) ? hint(user, messages, chat.tools, undefined) : user;
}

/** What routing reads of a /v1/responses request. */
export interface ResponsesRouteFields {
  readonly instructions?: unknown;
  readonly input?: unknown;
  readonly tools?: unknown;
}

/** The route of a /v1/responses request (`instructions` lead, then `input`); `user` as in chatRouteHint. */
export function responsesRouteHint(model: RoutedModel, body: ResponsesRouteFields, user: string | undefined): RouteHint | string | undefined {
  if (model.router?.policy !== 'prefix') return user;
  const system = typeof body.instructions === 'string' && body.instructions !== '' ? body.instructions : undefined;
  const input = body.input;
  const items = typeof input === 'string' ? [{ role: 'user', content: input }] : input;
  return Array.isArray(items) ? hint(user, items, body.tools, system) : user;
}

function hint(user: string | undefined, messages: readonly unknown[], tools: unknown, system: string | undefined): RouteHint | string | undefined {
  const keyed = user !== undefined && user !== '';
  const seed = keyed ? fnv1a(user) : 0x811c9dc5;
  const p = prefixUnits(seed, messages, tools, system);
  if (p === undefined) return user;
  return { user, key: keyed ? seed : p.units[p.firstTurn]!, units: p.units, minUnit: keyed ? 0 : p.firstTurn };
}

/** The sticky user key of a route (a string route is one). */
export function routeUser(route: RouteHint | string | undefined): string | undefined {
  return typeof route === 'object' ? route.user : route;
}
