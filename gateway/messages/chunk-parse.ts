// Parsing one upstream stream chunk. JSON.parse of a vLLM chunk (~300 bytes with continuous
// usage) is most of the translation's CPU; the chunk of an ordinary text token always has the
// same shape, so it is matched by one anchored regex (about 6x cheaper) and built as the object
// JSON.parse would have returned (less id, created, model and total_tokens, which nothing reads).
// Anything else (role, reasoning, tool calls, finish, errors, other key orders or extra fields)
// goes through JSON.parse: the result is the same either way.
import type { ChatChunk } from './stream.js';

// A JSON string body without escapes or control characters; the content may hold escapes
// (validated below by JSON.parse of the literal). Numbers in JSON's own grammar.
const PLAIN = String.raw`[^"\\\x00-\x1f]*`;
const INT = '(?:0|[1-9][0-9]*)';
const TEXT_CHUNK = new RegExp(
  String.raw`^\{"id":"${PLAIN}","object":"chat\.completion\.chunk","created":${INT},"model":"${PLAIN}",` +
    String.raw`"choices":\[\{"index":0,"delta":\{"content":"((?:[^"\\\x00-\x1f]|\\.)*)"\},"logprobs":null,"finish_reason":null\}\],` +
    String.raw`"usage":\{"prompt_tokens":(${INT}),"total_tokens":${INT},"completion_tokens":(${INT})\}\}$`,
);

/** The chunk in `data`, as JSON.parse returns it (throws like JSON.parse on bad JSON). */
export function parseChunk(data: string): ChatChunk {
  const m = TEXT_CHUNK.exec(data);
  if (m !== null) {
    let content = m[1]!;
    if (content.includes('\\')) {
      try {
        content = JSON.parse(`"${content}"`) as string;
      } catch {
        return JSON.parse(data) as ChatChunk; // throws: a bad escape
      }
    }
    return {
      object: 'chat.completion.chunk',
      choices: [{ delta: { content }, finish_reason: null }],
      usage: { prompt_tokens: Number(m[2]), completion_tokens: Number(m[3]) },
    };
  }
  return JSON.parse(data) as ChatChunk;
}
