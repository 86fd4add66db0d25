// The tools of a /v1/responses request, made into what a vLLM-style backend can take (it knows
// function tools only, and answers 400 `tools.N.type` for any other):
//
// - `function` tools pass as they are.
// - A `namespace` tool (OpenAI's grouping of functions, e.g. Codex's `multi_agent_v1` with
//   `spawn_agent`, `wait_agent`...) becomes one function tool per function, named
//   `<namespace>__<name>` (the flat form Codex itself uses where a namespace cannot be kept),
//   made unique against every other name of the request. The model calls that name; the response
//   is given back the call as OpenAI writes it, `{type: "function_call", name, namespace}`
//   (namespace-relay.ts), which is how Codex routes it. Calls the client sends back in `input`
//   (with their `namespace`) are renamed to the flat name, so the model sees its own calls.
// - Every other known type is left out before the backend and named in the response header
//   `x-rc-dropped-tools`: the hosted tools OpenAI runs on its servers (web_search, file_search,
//   code_interpreter, image_generation, mcp, tool_search...) and the built-in tools with call items
//   of their own (computer, local_shell, shell, apply_patch, custom) that a function-calling model
//   cannot produce. A client with such defaults (Codex sends web_search) works; the model does
//   without them, as it would on any server that lacks them.
// - An unknown type, or a tool that is not an object with a string `type`, is a 400 in the chat
//   shape with the tool's path as `param` (`tools[7].type`).
//
// A request whose tools are all functions, with no namespaced call in its input, is not changed.
import { CHAT_CODES, GatewayError } from '../errors.js';

/** Tool types left out before the backend (OpenAI's Responses API, openai-node 6.49's `Tool`). */
export const DROPPED_TOOL_TYPES: ReadonlySet<string> = new Set([
  'web_search',
  'web_search_2025_08_26',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'file_search',
  'code_interpreter',
  'image_generation',
  'mcp',
  'tool_search',
  'programmatic_tool_calling',
  'computer',
  'computer_use_preview',
  'local_shell',
  'shell',
  'apply_patch',
  'custom',
]);

/** The response header naming the tool types left out. */
export const DROPPED_TOOLS_HEADER = 'x-rc-dropped-tools';

/** The namespace function a flat name offered to the backend stands for. */
export interface NamespacedName {
  namespace: string;
  name: string;
}

/** The flat names of one request's namespace functions, to give calls back their namespace. */
export interface NamespaceNames {
  /** flat name -> the namespace function. */
  readonly byFlat: ReadonlyMap<string, NamespacedName>;
  /** The request's tools as the client sent them (the response's `tools` echo). */
  readonly clientTools: unknown[];
}

export interface ToolPlan {
  /** The body was changed (tools flattened or left out, input calls renamed): re-serialize it. */
  changed: boolean;
  /** The types left out, in order, each once. */
  dropped: string[];
  /** Set when the request had namespace functions. */
  names: NamespaceNames | undefined;
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function invalidTool(param: string, message: string): GatewayError {
  return new GatewayError(CHAT_CODES.invalidTool, message, 400, 'invalid_request_error', param);
}

/** Names as OpenAI allows them (`^[a-zA-Z0-9_-]+$`): any other character becomes `_`, so a flat name is found as plain bytes. */
const sanitize = (s: string): string => s.replace(/[^A-Za-z0-9_-]/g, '_');

/** The flat form of a namespace function's name (before it is made unique). */
export function flatName(namespace: string, name: string): string {
  return sanitize(`${namespace}__${name}`);
}

/**
 * The names of one request, each made unique: `base`, or `base_2`, `base_3`... (the first not
 * taken). The next suffix to try is kept per base, so a request of n functions with one name
 * costs n tries, not n²/2: retrying from `_2` for every one held the process for seconds at
 * 20,000 functions (issue 44). A probe that fails hits a name taken, and each taken name fails
 * at most a few probes, so the whole request stays linear in its number of names.
 */
export class UniqueNames {
  private readonly taken = new Set<string>();
  /** base -> the next suffix to try for it (absent: `base` itself was never tried). */
  private readonly next = new Map<string, number>();
  /** Names tried so far, taken or not: at most a few per name (the tests hold it to that). */
  probes = 0;

  /** A name the request already uses as it is (a plain function's): later names must differ. */
  reserve(name: string): void {
    this.taken.add(name);
  }

  /** `base`, or the first free `base_<n>`; taken from then on. */
  take(base: string): string {
    let i = this.next.get(base);
    let name = base;
    if (i === undefined) i = 2;
    else name = `${base}_${i++}`;
    this.probes++;
    while (this.taken.has(name)) {
      name = `${base}_${i++}`;
      this.probes++;
    }
    this.next.set(base, i);
    this.taken.add(name);
    return name;
  }

  get size(): number {
    return this.taken.size;
  }
}

/**
 * Plans the request's tools (see the top of this file) and applies the plan to `o`: `o.tools`
 * replaced when anything was flattened or left out, namespaced calls in `o.input` renamed.
 * Returns the 400 to answer instead when a tool is unknown or malformed.
 */
export function planTools(o: Record<string, unknown>): ToolPlan | GatewayError {
  const plan: ToolPlan = { changed: false, dropped: [], names: undefined };
  const tools = o.tools;
  if (tools === undefined || tools === null) return renameInputCalls(o, plan);
  if (!Array.isArray(tools)) return invalidTool('tools', 'tools must be an array of tool objects');

  // First pass: check every tool, and learn the plain function names (a flat name must differ).
  const taken = new UniqueNames();
  let simple = true;
  for (let i = 0; i < tools.length; i++) {
    const t: unknown = tools[i];
    if (!isRecord(t)) return invalidTool(`tools[${i}]`, `tools[${i}] must be an object`);
    const type = t.type;
    if (typeof type !== 'string') return invalidTool(`tools[${i}].type`, `tools[${i}].type must be a string`);
    if (type === 'function') {
      if (typeof t.name === 'string') taken.reserve(t.name);
      continue;
    }
    simple = false;
    if (type === 'namespace') {
      const err = checkNamespace(t, i);
      if (err) return err;
    } else if (!DROPPED_TOOL_TYPES.has(type)) {
      return invalidTool(
        `tools[${i}].type`,
        `tools[${i}].type: unknown tool type ${JSON.stringify(type.slice(0, 64))} (served: function, namespace; left out: ${[...DROPPED_TOOL_TYPES].join(', ')})`,
      );
    }
  }
  if (simple) return renameInputCalls(o, plan);
  const forced = forcedLeftOut(o.tool_choice);
  if (forced) return forced;

  // Second pass: the tools the backend gets.
  const byFlat = new Map<string, NamespacedName>();
  const out: unknown[] = [];
  for (const t of tools as Record<string, unknown>[]) {
    const type = t.type as string;
    if (type === 'function') out.push(t);
    else if (type === 'namespace') {
      const namespace = t.name as string;
      for (const f of t.tools as Record<string, unknown>[]) {
        if (f.type !== 'function') {
          noteDropped(plan, f.type as string);
          continue;
        }
        const name = f.name as string;
        const flat = taken.take(flatName(namespace, name));
        byFlat.set(flat, { namespace, name });
        out.push({ ...f, name: flat, description: joinDescriptions(t.description, f.description) });
      }
    } else noteDropped(plan, type);
  }
  plan.changed = true;
  plan.names = byFlat.size > 0 ? { byFlat, clientTools: tools } : undefined;
  o.tools = out;
  return renameInputCalls(o, plan);
}

/** A tool_choice that forces a tool of a type left out: the backend could not honour it. */
function forcedLeftOut(choice: unknown): GatewayError | undefined {
  if (!isRecord(choice) || choice.type === 'function' || choice.type === 'allowed_tools') return undefined;
  const type = typeof choice.type === 'string' ? choice.type.slice(0, 64) : String(choice.type);
  return invalidTool('tool_choice.type', `tool_choice: a ${JSON.stringify(type)} tool cannot be forced, tools of that type are left out on this gateway`);
}

function noteDropped(plan: ToolPlan, type: string): void {
  if (!plan.dropped.includes(type)) plan.dropped.push(type);
}

/** A namespace tool's own checks: a name, and a list of function (or custom) tools. */
function checkNamespace(t: Record<string, unknown>, i: number): GatewayError | undefined {
  if (typeof t.name !== 'string' || t.name === '') return invalidTool(`tools[${i}].name`, `tools[${i}].name: a namespace tool needs a name`);
  if (!Array.isArray(t.tools)) return invalidTool(`tools[${i}].tools`, `tools[${i}].tools: a namespace tool needs a list of tools`);
  for (let j = 0; j < t.tools.length; j++) {
    const f: unknown = t.tools[j];
    const at = `tools[${i}].tools[${j}]`;
    if (!isRecord(f)) return invalidTool(at, `${at} must be an object`);
    if (f.type === 'function') {
      if (typeof f.name !== 'string' || f.name === '') return invalidTool(`${at}.name`, `${at}.name must be a non-empty string`);
    } else if (f.type !== 'custom') {
      return invalidTool(`${at}.type`, `${at}.type: a namespace holds function and custom tools only`);
    }
  }
  return undefined;
}

/** The namespace's description (shown to the model for all its functions) before the function's own. */
function joinDescriptions(namespace: unknown, fn: unknown): unknown {
  if (typeof namespace !== 'string' || namespace === '') return fn;
  if (typeof fn !== 'string' || fn === '') return namespace;
  return `${namespace}\n\n${fn}`;
}

/**
 * Calls the client sends back in `input` with a `namespace` (as the response gave them) get the
 * flat name the model called, and lose the field (a backend's input schema has none).
 */
function renameInputCalls(o: Record<string, unknown>, plan: ToolPlan): ToolPlan {
  const input = o.input;
  if (!Array.isArray(input)) return plan;
  let flatOf: Map<string, string> | undefined;
  for (let i = 0; i < input.length; i++) {
    const item: unknown = input[i];
    if (!isRecord(item) || item.type !== 'function_call' || typeof item.namespace !== 'string' || typeof item.name !== 'string') continue;
    if (flatOf === undefined) {
      flatOf = new Map();
      if (plan.names) for (const [flat, n] of plan.names.byFlat) flatOf.set(`${n.namespace}\u0000${n.name}`, flat);
    }
    const { namespace, ...rest } = item;
    input[i] = { ...rest, name: flatOf.get(`${namespace}\u0000${item.name}`) ?? flatName(namespace as string, item.name) };
    plan.changed = true;
  }
  return plan;
}
