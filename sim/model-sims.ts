// Simulated backends for catalog models that name no upstream: what `npm start` runs for the
// default shared catalog. `replicas` sims per model (1 by default; more show the gateway's
// routing among a model's backends at work), on consecutive ports from `portBase`.
import type { ModelEntry } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import { startSim, type SimFlavour, type SimServer } from './server.js';

export interface CatalogSimOptions {
  host: string;
  /** Port of the first sim; the i-th sim started gets portBase + i (0: ephemeral ports). */
  portBase: number;
  /** Sims per model (default 1). */
  replicas?: number;
  ttftMs?: number;
  tokensPerSecond?: number;
  fast?: boolean;
  /** The server the sims speak as (default: current vLLM), unless `flavours` names one for the model. */
  flavour?: SimFlavour;
  /** Per catalog model name: the server its sims speak as. */
  flavours?: Readonly<Record<string, SimFlavour>>;
  /** Report cached prompt tokens (vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report). */
  promptTokensDetails?: boolean;
  logger?: Logger;
}

/** Starts `replicas` sims for each model without upstreams (served name, reasoning and context from the entry). */
export async function startCatalogSims(models: readonly ModelEntry[], o: CatalogSimOptions): Promise<Map<string, SimServer[]>> {
  const sims = new Map<string, SimServer[]>();
  try {
    let i = 0;
    for (const m of models) {
      if (m.upstreams.length) continue;
      const replicas: SimServer[] = [];
      sims.set(m.name, replicas);
      for (let r = 0; r < (o.replicas ?? 1); r++) {
        replicas.push(
          await startSim({
            host: o.host,
            port: o.portBase === 0 ? 0 : o.portBase + i++,
            model: m.servedName ?? m.name,
            reasoning: m.reasoning,
            maxModelLen: m.maxContext, // absent: the sim's default (32768)
            ttftMs: o.ttftMs,
            tokensPerSecond: o.tokensPerSecond,
            fast: o.fast,
            flavour: o.flavours?.[m.name] ?? o.flavour,
            promptTokensDetails: o.promptTokensDetails,
            logger: o.logger,
          }),
        );
      }
    }
  } catch (err) {
    await Promise.all([...sims.values()].flat().map((s) => s.close()));
    throw err;
  }
  return sims;
}
