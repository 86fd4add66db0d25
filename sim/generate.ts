// Deterministic output: a seeded PRNG, filler text made of pieces that are one sim token each,
// and tool-call arguments generated from a function's JSON Schema.
import { randomUUID } from 'node:crypto';
import { tokenize } from './tokenizer.js';

/** A random 32-hex-digit id (as vLLM gives completions, responses, items and tool calls). */
export const hexId = (): string => randomUUID().replace(/-/g, '');

/** mulberry32: a tiny, fast, seedable PRNG returning floats in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** FNV-1a over a string's UTF-16 code units, mixed with `seed`. */
export function hashString(s: string, seed = 0): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

// Words of at most 8 ASCII letters: " word" is always exactly one sim token.
const ANSWER_WORDS = (
  'the a model answer is of to and in that it for on with as this can be by we are from or an at ' +
  'data value result token server stream request simple output example system tested works fine ' +
  'quick brown fox jumps over lazy dog river mountain cloud signal vector matrix kernel cluster'
).split(' ');
const REASONING_WORDS = (
  'let me think about the question first so we need to check what user asks then consider ' +
  'options step one two next maybe because thus hence likely answer should be careful'
).split(' ');

/**
 * `n` text pieces, each exactly one sim token, that read like sentences. Concatenated they
 * tokenize back to exactly `n` tokens.
 */
export function textPieces(rng: () => number, n: number, words: readonly string[] = ANSWER_WORDS): string[] {
  const out = new Array<string>(n);
  let sentenceStart = true;
  let sinceBreak = 0;
  for (let i = 0; i < n; i++) {
    if (!sentenceStart && sinceBreak >= 3 && rng() < 0.15) {
      out[i] = rng() < 0.7 ? '.' : ',';
      sentenceStart = out[i] === '.';
      sinceBreak = 0;
      continue;
    }
    let w = words[Math.floor(rng() * words.length)]!;
    if (sentenceStart) w = w[0]!.toUpperCase() + w.slice(1);
    out[i] = i === 0 ? w : ' ' + w;
    sentenceStart = false;
    sinceBreak++;
  }
  return out;
}

export const reasoningPieces = (rng: () => number, n: number): string[] => textPieces(rng, n, REASONING_WORDS);

// ---- tool-call arguments from a JSON Schema --------------------------------------------------

type Schema = Record<string, unknown>;
const isSchema = (v: unknown): v is Schema => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * Most values (objects, arrays, strings, numbers...) generated for one tool call, and the longest
 * string. A schema from the request may ask for anything (`minItems: 1e9`, nested arrays of
 * arrays); beyond these the sim writes shorter values instead of running out of memory. The
 * answer is cut to max_tokens (at most the context window) anyway.
 */
export const MAX_GENERATED_VALUES = 1000;
export const MAX_GENERATED_STRING = 1024;

/**
 * A value valid for `schema` (the JSON Schema subset tools use: type, properties, required,
 * items, enum, const, anyOf/oneOf, minimum/maximum, minItems/maxItems, minLength/maxLength),
 * chosen deterministically by `rng`. All declared properties are filled in, within
 * MAX_GENERATED_VALUES values (`budget`) and MAX_GENERATED_STRING characters per string.
 */
export function valueForSchema(schema: unknown, rng: () => number, depth = 0, budget = { left: MAX_GENERATED_VALUES }): unknown {
  if (budget.left <= 0) return {};
  budget.left--;
  if (!isSchema(schema) || depth > 8) return {};
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[Math.floor(rng() * schema.enum.length)];
  const alt = (Array.isArray(schema.anyOf) && schema.anyOf) || (Array.isArray(schema.oneOf) && schema.oneOf);
  if (alt && alt.length) {
    const nonNull = alt.find((s) => !(isSchema(s) && s.type === 'null'));
    return valueForSchema(nonNull ?? alt[0], rng, depth + 1, budget);
  }
  if (Array.isArray(schema.allOf) && schema.allOf.length) {
    const merged: Schema = { type: 'object', properties: {} };
    for (const s of schema.allOf) {
      if (!isSchema(s)) continue;
      Object.assign(merged.properties as Schema, s.properties ?? {});
      if (s.type) merged.type = s.type;
    }
    return valueForSchema(merged, rng, depth + 1, budget);
  }
  let type = schema.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') ?? type[0];
  if (type === undefined) type = isSchema(schema.properties) ? 'object' : schema.items ? 'array' : 'string';
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      const props = isSchema(schema.properties) ? schema.properties : {};
      for (const key of Object.keys(props)) out[key] = valueForSchema(props[key], rng, depth + 1, budget);
      return out;
    }
    case 'array': {
      const min = typeof schema.minItems === 'number' ? schema.minItems : 1;
      const max = typeof schema.maxItems === 'number' ? schema.maxItems : Math.max(min, 2);
      const n = Math.min(max, Math.max(min, 1 + Math.floor(rng() * 2)), budget.left);
      const out: unknown[] = [];
      for (let i = 0; i < n && budget.left > 0; i++) out.push(valueForSchema(schema.items, rng, depth + 1, budget));
      return out;
    }
    case 'integer':
    case 'number': {
      const lo = typeof schema.minimum === 'number' ? schema.minimum : typeof schema.exclusiveMinimum === 'number' ? schema.exclusiveMinimum + 1 : 0;
      const hi = typeof schema.maximum === 'number' ? schema.maximum : typeof schema.exclusiveMaximum === 'number' ? schema.exclusiveMaximum - 1 : lo + 100;
      const v = lo + rng() * Math.max(0, hi - lo);
      return type === 'integer' ? Math.min(Math.floor(hi), Math.max(Math.ceil(lo), Math.round(v))) : Math.round(v * 100) / 100;
    }
    case 'boolean':
      return rng() < 0.5;
    case 'null':
      return null;
    default: {
      const minLength = typeof schema.minLength === 'number' ? Math.min(schema.minLength, MAX_GENERATED_STRING) : 0;
      const maxLength = Math.min(typeof schema.maxLength === 'number' ? schema.maxLength : Infinity, MAX_GENERATED_STRING);
      let s = ANSWER_WORDS[Math.floor(rng() * ANSWER_WORDS.length)]!;
      while (s.length < minLength) s += ' ' + ANSWER_WORDS[Math.floor(rng() * ANSWER_WORDS.length)]!;
      return s.slice(0, Math.max(minLength, Math.min(maxLength, s.length)));
    }
  }
}

/** Tool-call `arguments` (compact JSON) for a function's parameter schema, split into token pieces. */
export function toolArgumentPieces(parameters: unknown, rng: () => number): string[] {
  const value = parameters === undefined ? {} : valueForSchema(parameters, rng);
  return tokenize(JSON.stringify(value));
}
