// Parsing one upstream stream chunk. JSON.parse of a vLLM chunk (~300 bytes with continuous
// usage) is most of the translation's CPU; the chunks of a plain text answer always have the same
// few shapes, so they are matched by one anchored regex (several times cheaper) and built as the
// object JSON.parse would have returned (less id, created, model and total_tokens, which nothing
// reads). The shapes: a text token, the first chunk (role and empty content), the last token with
// its finish reason (and vLLM's stop_reason), and the usage-only chunk (no choices, cached-token
// details). Anything else (reasoning, tool calls, errors, other key orders or extra fields) goes
// through JSON.parse: the result is the same either way.
import type { ChatChunk } from './stream.js';

// A JSON string body without escapes or control characters; the content may hold escapes
// (validated below by JSON.parse of the literal). Numbers in JSON's own grammar.
const PLAIN = String.raw`[^"\\\x00-\x1f]*`;
const INT = '(?:0|[1-9][0-9]*)';
// Groups: 1 role, 2 content, 3 finish reason (none when null), 4 prompt tokens, 5 completion
// tokens, 6 `null` details, 7 cached tokens. No choice at all leaves 1 to 3 undefined.
const CHUNK = new RegExp(
  String.raw`^\{"id":"${PLAIN}","object":"chat\.completion\.chunk","created":${INT},"model":"${PLAIN}",` +
    String.raw`"choices":\[(?:\{"index":0,"delta":\{(?:"role":"(assistant)",)?"content":"((?:[^"\\\x00-\x1f]|\\.)*)"\},"logprobs":null,` +
    String.raw`"finish_reason":(?:null|"([a-z_]+)")(?:,"stop_reason":(?:null|${INT}|"${PLAIN}"))?\})?\],` +
    String.raw`"usage":\{"prompt_tokens":(${INT}),"total_tokens":${INT},"completion_tokens":(${INT})` +
    String.raw`(?:,"prompt_tokens_details":(?:(null)|\{"cached_tokens":(${INT})\}))?\}\}$`,
);

/**
 * The value of a regex-matched JSON integer. Number() of a string computes the string's hash on
 * the way (an array-index check), several times the cost of reading two or three digits; past 15
 * digits, where a double can no longer hold every integer, Number() rounds as JSON.parse does.
 */
function intOf(digits: string): number {
  if (digits.length > 15) return Number(digits);
  let n = 0;
  for (let i = 0; i < digits.length; i++) n = n * 10 + digits.charCodeAt(i) - 0x30;
  return n;
}

/** The chunk in `data`, as JSON.parse returns it (throws like JSON.parse on bad JSON). */
export function parseChunk(data: string): ChatChunk {
  const m = CHUNK.exec(data);
  if (m === null) return JSON.parse(data) as ChatChunk;
  const usage: NonNullable<ChatChunk['usage']> = { prompt_tokens: intOf(m[4]!), completion_tokens: intOf(m[5]!) };
  if (m[7] !== undefined) usage.prompt_tokens_details = { cached_tokens: intOf(m[7]) };
  else if (m[6] !== undefined) usage.prompt_tokens_details = null;
  let content = m[2];
  if (content === undefined) return { object: 'chat.completion.chunk', choices: [], usage };
  if (content.includes('\\')) {
    try {
      content = JSON.parse(`"${content}"`) as string;
    } catch {
      return JSON.parse(data) as ChatChunk; // throws: a bad escape
    }
  }
  const delta = m[1] === undefined ? { content } : { role: 'assistant', content };
  return { object: 'chat.completion.chunk', choices: [{ delta, finish_reason: m[3] ?? null }], usage };
}
