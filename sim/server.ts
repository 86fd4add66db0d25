// The simulated serving backend: an OpenAI-compatible server that behaves like vLLM where a
// client can see it (routes, bodies, SSE chunks, usage, errors), with configurable pace and
// faults. Runs in-process (startSim) and as `rc sim` (sim/cli.ts).
import { z } from 'zod';
import { uws, type HttpRequest, type HttpResponse } from '../lib/uws.js';
import { listen, MAX_JSON_DEPTH, parseJsonObject, readBody, sendJson, statusLine, track, type Res, type Server } from '../lib/http.js';
import { createLogger, type Logger } from '../lib/log.js';
import { DEFAULT_AFTER_CHUNKS, DEFAULT_RETRY_AFTER_S, FaultState, parseFault, type Fault } from './faults.js';
import { hexId } from './generate.js';
import { planOutput } from './plan.js';
import { completionBody, StreamRenderer } from './render.js';
import { chatRequestSchema, checkChatRequest, SimRequestError, tokenizeChatSchema, tokenizePromptSchema, validate, vllmError } from './request.js';
import { applyChatTemplate, countTokens, encode, tokenize } from './tokenizer.js';
import { PrefixCache } from './prefix-cache.js';
import { responseBody, responsesRequestSchema, responsesToChat, ResponsesStreamRenderer, type ResponsesRequest } from './responses.js';

/** Which API a generation request came in on. */
type Api = 'chat' | 'responses';

export const simOptionsSchema = z.object({
  host: z.string().min(1).default('127.0.0.1'),
  port: z.number().int().min(0).max(65535).default(0),
  /** The served model name, echoed as `model`. */
  model: z.string().min(1).max(256).default('sim'),
  /** Emit reasoning before the answer. */
  reasoning: z.boolean().default(false),
  /** Context window (prompt + output tokens). */
  maxModelLen: z.number().int().positive().default(32768),
  /** Time to first token. */
  ttftMs: z.number().min(0).default(80),
  /** Output pace after the first token. */
  tokensPerSecond: z.number().positive().default(50),
  /** No delays at all (benchmarks). */
  fast: z.boolean().default(false),
  /** Default seed (a request's `seed` overrides it). */
  seed: z.number().int().default(0),
  /** Largest request body (413 beyond). */
  maxBodyBytes: z
    .number()
    .int()
    .positive()
    .default(8 * 1024 * 1024),
  /** Model vLLM's automatic prefix caching: repeated prompt prefixes are reported as cached_tokens. */
  prefixCaching: z.boolean().default(true),
  /** KV cache block size in tokens (vLLM's default: 16): cached tokens come in whole blocks. */
  blockSize: z.number().int().positive().default(16),
});
export type SimOptions = z.input<typeof simOptionsSchema> & {
  /** A standing fault from the start. */
  fault?: Fault | undefined;
  logger?: Logger | undefined;
};

export interface SimStats {
  /** Chat completion requests received. */
  requests: number;
  /** Requests whose response the sim ended (success or error status). */
  completed: number;
  /** Requests whose client went away before the end. */
  aborted: number;
  /** Requests a fault was applied to. */
  faulted: number;
  /** POST /tokenize requests received. */
  tokenizeRequests: number;
  /** Requests not yet ended (including stalled ones). */
  inFlight: number;
  /** Headers (lower-case names) of the last chat completion or tokenize request. */
  lastHeaders: Record<string, string> | undefined;
  /** Parsed body of the last chat completion or tokenize request. */
  lastBody: Record<string, unknown> | undefined;
}

export interface SimServer extends Server {
  readonly model: string;
  readonly stats: SimStats;
  /** Sets (or clears) the standing fault; with `count`, it applies to the next `count` requests only. */
  setFault(fault: Fault | undefined): void;
}

type Outcome = 'completed' | 'aborted' | 'closed';

const NOT_AN_OBJECT = `Request body is not a valid JSON object (nesting at most ${MAX_JSON_DEPTH} levels)`;

/** One chat completion in progress: its response, timers and how it ended. */
interface Call {
  res: Res;
  timer: NodeJS.Timeout | undefined;
  ended: boolean;
}

export async function startSim(options: SimOptions = {}): Promise<SimServer> {
  const opts = simOptionsSchema.parse(options);
  const log = (options.logger ?? createLogger()).child({ part: 'sim', model: opts.model });
  const faults = new FaultState();
  faults.set(options.fault);
  const stats: SimStats = { requests: 0, completed: 0, aborted: 0, faulted: 0, tokenizeRequests: 0, inFlight: 0, lastHeaders: undefined, lastBody: undefined };
  const calls = new Set<Call>();
  const prefixCache = opts.prefixCaching ? new PrefixCache(opts.blockSize) : undefined;
  const modelJson = JSON.stringify(opts.model);
  const tokenDelayMs = 1000 / opts.tokensPerSecond;
  const created = Math.floor(Date.now() / 1000);
  const modelsBody = JSON.stringify({
    object: 'list',
    data: [
      {
        id: opts.model,
        object: 'model',
        created,
        owned_by: 'vllm',
        root: opts.model,
        parent: null,
        max_model_len: opts.maxModelLen,
        permission: [
          {
            id: `modelperm-${hexId()}`,
            object: 'model_permission',
            created,
            allow_create_engine: false,
            allow_sampling: true,
            allow_logprobs: true,
            allow_search_indices: false,
            allow_view: true,
            allow_fine_tuning: false,
            organization: '*',
            group: null,
            is_blocking: false,
          },
        ],
      },
    ],
  });

  const end = (call: Call, outcome: Outcome) => {
    if (call.ended) return;
    call.ended = true;
    if (call.timer) clearTimeout(call.timer);
    call.timer = undefined;
    calls.delete(call);
    stats.inFlight--;
    if (outcome === 'completed') stats.completed++;
    else if (outcome === 'aborted') stats.aborted++;
  };

  const fail = (call: Call, err: SimRequestError | { status: number; message: string }) => {
    const body = err instanceof SimRequestError ? err.body() : vllmError(err.status, err.message);
    sendJson(call.res, err.status, body);
    end(call, 'completed');
  };

  /**
   * Cuts the connection (close-mid-stream). Deferred: inside a uWS callback the response is
   * corked, and closing there would drop the chunks written just before.
   */
  const cut = (call: Call) => {
    setImmediate(() => {
      if (call.ended) return;
      end(call, 'closed');
      call.res.onAbort = undefined;
      call.res.aborted = true;
      call.res.close();
    });
  };

  function recordHeaders(req: HttpRequest): void {
    const h: Record<string, string> = {};
    req.forEach((k, v) => {
      h[k] = v;
    });
    stats.lastHeaders = h;
  }

  const unknownModel = (name: string | null | undefined) =>
    name != null && name !== opts.model ? new SimRequestError(404, `The model \`${name}\` does not exist.`, 'model') : undefined;

  const chatCompletions = (res: HttpResponse, req: HttpRequest) => generation(res, req, 'chat');
  const responses = (res: HttpResponse, req: HttpRequest) => generation(res, req, 'responses');

  /** POST /v1/chat/completions and POST /v1/responses: one generation each. */
  function generation(res: HttpResponse, req: HttpRequest, api: Api): void {
    const r = track(res);
    const call: Call = { res: r, timer: undefined, ended: false };
    stats.requests++;
    stats.inFlight++;
    calls.add(call);
    r.onAbort = () => end(call, 'aborted');
    recordHeaders(req);
    const faultHeader = req.getHeader('x-sim-fault');
    readBody(
      r,
      req.getHeader('content-length'),
      opts.maxBodyBytes,
      (buf) => {
        let fault: Fault | undefined;
        if (faultHeader) {
          fault = parseFault(faultHeader);
          if (!fault) return fail(call, new SimRequestError(400, `x-sim-fault: unknown fault ${JSON.stringify(faultHeader)}`, 'x-sim-fault'));
        } else {
          fault = faults.take();
        }
        const body = parseJsonObject(buf);
        if (body) stats.lastBody = body;
        if (fault) {
          stats.faulted++;
          if (fault.kind === '500') return fail(call, { status: 500, message: 'Simulated internal server error (sim fault 500)' });
          if (fault.kind === '429') {
            sendJson(r, 429, vllmError(429, 'Simulated rate limit (sim fault 429)'), { 'retry-after': String(fault.retryAfterS ?? DEFAULT_RETRY_AFTER_S) });
            return end(call, 'completed');
          }
          if (fault.kind === 'stall-before') return; // never answers; ends when the client goes away
        }
        if (!body) return fail(call, new SimRequestError(400, NOT_AN_OBJECT, null));
        try {
          complete(call, body, fault, api);
        } catch (err) {
          if (err instanceof SimRequestError) return fail(call, err);
          log.error('chat completion failed', { err });
          fail(call, { status: 500, message: 'Internal error in the sim' });
        }
      },
      (err) => fail(call, { status: err.status, message: err.message }),
    );
  }

  function complete(call: Call, body: Record<string, unknown>, fault: Fault | undefined, api: Api): void {
    // A Responses request is mapped onto a chat request: validated, planned and counted the same way.
    let responsesReq: ResponsesRequest | undefined;
    if (api === 'responses') responsesReq = validate(responsesRequestSchema, body);
    const req = validate(chatRequestSchema, responsesReq ? responsesToChat(responsesReq) : body);
    const notFound = unknownModel(req.model);
    if (notFound) throw notFound;
    checkChatRequest(req);
    const promptText = applyChatTemplate(req.messages, req.tools);
    // With prefix caching the token ids are needed anyway (block hashes): count them once.
    const promptIds = prefixCache ? encode(promptText) : undefined;
    const promptTokens = promptIds ? promptIds.length : countTokens(promptText);
    if (promptTokens >= opts.maxModelLen) {
      throw new SimRequestError(
        400,
        `This model's maximum context length is ${opts.maxModelLen} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`,
        'messages',
      );
    }
    const room = opts.maxModelLen - promptTokens;
    const maxTokens = req.max_completion_tokens ?? req.max_tokens;
    if (maxTokens != null && maxTokens > room) {
      throw new SimRequestError(
        400,
        `'max_tokens' or 'max_completion_tokens' is too large: ${maxTokens}. This model's maximum context length is ${opts.maxModelLen} tokens and your request has ${promptTokens} input tokens (${maxTokens} > ${opts.maxModelLen} - ${promptTokens}).`,
        'max_tokens',
      );
    }
    const plan = planOutput(req, { reasoningModel: opts.reasoning, limit: maxTokens ?? room, promptText, seed: opts.seed });
    // Prompt tokens served from the prefix cache (0 without it); the prompt's blocks are stored.
    const cached = promptIds ? prefixCache!.lookup(promptIds) : 0;
    const id = `${responsesReq ? 'resp_' : 'chatcmpl-'}${hexId()}`;
    const now = Math.floor(Date.now() / 1000);
    const meta = responsesReq && { id, created: now, model: opts.model, req: responsesReq, promptTokens, cachedTokens: cached };
    const r = call.res;

    if (!req.stream) {
      const json = JSON.stringify(meta ? responseBody(meta, plan) : completionBody(id, now, opts.model, plan, promptTokens, cached));
      if (fault && (fault.kind === 'close-mid-stream' || fault.kind === 'stall-during')) {
        // Head and half the body, then the fault.
        r.cork(() => {
          r.writeStatus('200 OK');
          r.writeHeader('content-type', 'application/json');
          r.write(json.slice(0, json.length >> 1));
        });
        if (fault.kind === 'close-mid-stream') cut(call);
        return;
      }
      if (opts.fast) {
        sendJson(r, 200, json);
        end(call, 'completed');
        return;
      }
      call.timer = setTimeout(
        () => {
          sendJson(r, 200, json);
          end(call, 'completed');
        },
        opts.ttftMs + Math.max(0, plan.completionTokens - 1) * tokenDelayMs,
      );
      return;
    }

    const so = req.stream_options;
    const includeUsage = so?.include_usage === true;
    const stream = meta
      ? new ResponsesStreamRenderer(meta, plan)
      : new StreamRenderer(id, now, modelJson, plan, promptTokens, includeUsage, includeUsage && so?.continuous_usage_stats === true, cached);
    const n = stream.tokens;
    const stopAt = fault && (fault.kind === 'close-mid-stream' || fault.kind === 'stall-during') ? Math.min(n, fault.afterChunks ?? DEFAULT_AFTER_CHUNKS) : -1;
    const tail = () => (n === 0 ? stream.emptyFinish() : '') + stream.tail();

    r.cork(() => {
      r.writeStatus('200 OK');
      r.writeHeader('content-type', 'text/event-stream; charset=utf-8');
      r.writeHeader('cache-control', 'no-cache');
      r.write(stream.role());
    });

    if (opts.fast) {
      // Everything at once; uWS keeps what the socket cannot take yet.
      const upTo = stopAt >= 0 ? stopAt : n;
      let out = '';
      for (let i = 0; i < upTo; i++) out += stream.token(i);
      if (stopAt >= 0) {
        r.cork(() => r.write(out));
        if (fault!.kind === 'close-mid-stream') cut(call);
        return;
      }
      r.cork(() => r.end(out + tail()));
      end(call, 'completed');
      return;
    }

    // Paced: token i is due at start + ttft + i / tokensPerSecond (no drift).
    const start = performance.now();
    let i = 0;
    let waitingWritable = false;
    r.onWritable(() => {
      if (waitingWritable) {
        waitingWritable = false;
        schedule();
      }
      return true;
    });
    const schedule = () => {
      const due = start + opts.ttftMs + i * tokenDelayMs;
      call.timer = setTimeout(step, Math.max(0, due - performance.now()));
    };
    const step = () => {
      call.timer = undefined;
      if (call.ended || r.aborted) return;
      if (i === stopAt) {
        if (fault!.kind === 'close-mid-stream') cut(call);
        return; // stall-during: keep the stream open, silent
      }
      let ok = true;
      if (i < n) {
        const chunk = stream.token(i++);
        r.cork(() => {
          ok = r.write(chunk);
        });
        if (i < n || stopAt === n) {
          if (ok) schedule();
          else waitingWritable = true;
          return;
        }
      }
      const last = tail();
      r.cork(() => r.end(last));
      end(call, 'completed');
    };
    schedule();
  }

  function tokenizeRoute(res: HttpResponse, req: HttpRequest): void {
    const r = track(res);
    stats.tokenizeRequests++;
    recordHeaders(req);
    readBody(
      r,
      req.getHeader('content-length'),
      opts.maxBodyBytes,
      (buf) => {
        const body = parseJsonObject(buf);
        if (!body) return sendJson(r, 400, vllmError(400, NOT_AN_OBJECT));
        stats.lastBody = body;
        try {
          let text: string;
          let returnStrs: boolean | null | undefined;
          if (body.messages !== undefined || body.prompt === undefined) {
            const t = validate(tokenizeChatSchema, body);
            const notFound = unknownModel(t.model);
            if (notFound) throw notFound;
            text = applyChatTemplate(t.messages, t.tools, t.add_generation_prompt);
            returnStrs = t.return_token_strs;
          } else {
            const t = validate(tokenizePromptSchema, body);
            const notFound = unknownModel(t.model);
            if (notFound) throw notFound;
            text = (t.add_special_tokens ? '<s>' : '') + t.prompt;
            returnStrs = t.return_token_strs;
          }
          const tokens = encode(text);
          sendJson(r, 200, { count: tokens.length, max_model_len: opts.maxModelLen, tokens, token_strs: returnStrs ? tokenize(text) : null });
        } catch (err) {
          if (err instanceof SimRequestError) return sendJson(r, err.status, err.body());
          log.error('tokenize failed', { err });
          sendJson(r, 500, vllmError(500, 'Internal error in the sim'));
        }
      },
      (err) => sendJson(r, err.status, vllmError(err.status, err.message)),
    );
  }

  const app = uws().App();
  app.post('/v1/chat/completions', chatCompletions);
  app.post('/v1/responses', responses);
  app.post('/tokenize', tokenizeRoute);
  app.get('/v1/models', (res) => {
    res.cork(() => {
      res.writeHeader('content-type', 'application/json');
      res.end(modelsBody);
    });
  });
  app.get('/health', (res) => {
    res.cork(() => res.end());
  });
  app.get('/version', (res) => {
    res.cork(() => {
      res.writeHeader('content-type', 'application/json');
      res.end('{"version":"rc-sim"}');
    });
  });
  app.any('/*', (res, req) => {
    const known = ['/v1/chat/completions', '/v1/responses', '/tokenize', '/v1/models', '/health', '/version'].includes(req.getUrl());
    res.cork(() => {
      res.writeStatus(statusLine(known ? 405 : 404));
      res.writeHeader('content-type', 'application/json');
      res.end(known ? '{"detail":"Method Not Allowed"}' : '{"detail":"Not Found"}');
    });
  });

  const server = await listen(app, opts.host, opts.port, () => stats.inFlight === 0);
  log.info('sim listening', { url: server.url, reasoning: opts.reasoning, fast: opts.fast });
  return {
    host: server.host,
    port: server.port,
    url: server.url,
    model: opts.model,
    stats,
    setFault: (fault) => faults.set(fault),
    async close(graceMs = 0) {
      await server.close(graceMs);
      // Whatever is left (stalled or paced streams) is cut; no timer keeps the process alive.
      for (const call of [...calls]) end(call, 'aborted');
    },
  };
}
