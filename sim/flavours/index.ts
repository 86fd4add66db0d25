// The flavours by name (sim/options.ts SIM_FLAVOURS).
import type { SimFlavour } from '../options.js';
import type { Flavour } from './flavour.js';
import { llamaCpp } from './llama-cpp.js';
import { sglang05, sglangMain } from './sglang.js';
import { vllm0101, vllm0111, vllmMain } from './vllm.js';

const FLAVOURS: Record<SimFlavour, Flavour> = {
  'vllm-0.10.1': vllm0101,
  'vllm-0.11.1': vllm0111,
  vllm: vllmMain,
  'sglang-0.5': sglang05,
  sglang: sglangMain,
  'llama.cpp': llamaCpp,
};

export const flavourOf = (name: SimFlavour): Flavour => FLAVOURS[name];

/** Which family's routes (/tokenize, /metrics) a flavour has. */
export const familyOf = (name: SimFlavour): 'vllm' | 'sglang' | 'llama.cpp' =>
  name.startsWith('vllm') ? 'vllm' : name.startsWith('sglang') ? 'sglang' : 'llama.cpp';

export type { ChatAnswer, ChatEvents, ErrorAnswer, Flavour, ToolChoiceKind } from './flavour.js';
