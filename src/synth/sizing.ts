/**
 * Chooses realistic dimensions for a requested model size. The search walks a ladder of real hidden
 * sizes (and, for mixture-of-experts models, expert counts near the usual one for that width), finds the
 * layer count that comes closest to the target, then fine-tunes the vocab size (in steps of 64) to land
 * near the exact byte count. Among the candidates it prefers a small size error first and a realistic
 * depth-to-width ratio second. Dimensions the caller fixes are never changed. Pure.
 */

import { isWeightcastError } from '../errors.js';
import {
  LAYER_EXPERTS_MAX,
  defaultExperts,
  defaultVocab,
  deriveDims,
  invalidOptions,
  modelTensorBytes,
  type DimChoices,
  type ModelDims,
  type SynthArch,
  type SynthDtype,
} from './architectures.js';
import { VOCAB_MIN } from './tokenizer.js';

/** Hidden sizes of real models, from toy widths past Llama-3.1-405B's 16384 (for terabyte models). */
export const HIDDEN_LADDER = [
  64, 128, 192, 256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168,
  8192, 12288, 16384, 20480, 24576, 32768,
];
const LAYERS_SEARCH_MAX = 160;
/** A candidate further than this from the target loses to any closer one, however realistic. */
const SIZE_ERROR_SOFT_MAX = 0.05;

export interface SizeRequest {
  arch: SynthArch;
  dtype: SynthDtype;
  targetBytes: number;
  /** Dimensions fixed by the caller; the search chooses only the others. */
  fixed?: Partial<DimChoices>;
}

interface Candidate {
  dims: ModelDims;
  score: number;
}

export function chooseDims(request: SizeRequest): ModelDims {
  if (!(Number.isFinite(request.targetBytes) && request.targetBytes > 0)) {
    throw invalidOptions(`size must be a positive number of bytes, got ${request.targetBytes}`);
  }
  const fixed = request.fixed ?? {};
  let best: Candidate | undefined;
  let lastProblem: Error | undefined;
  for (const hidden of fixed.hidden === undefined ? HIDDEN_LADDER : [fixed.hidden]) {
    for (const experts of expertCandidates(request.arch, hidden, fixed.experts)) {
      try {
        const candidate = bestWithShape(request, hidden, experts);
        if (best === undefined || candidate.score < best.score) best = candidate;
      } catch (error) {
        if (!isWeightcastError(error, 'SYNTH_INVALID_OPTIONS')) throw error;
        lastProblem = error;
      }
    }
  }
  if (best === undefined) throw lastProblem ?? invalidOptions('no dimensions fit the requested size');
  return best.dims;
}

function expertCandidates(
  arch: SynthArch,
  hidden: number,
  fixed: number | undefined,
): (number | undefined)[] {
  if (fixed !== undefined) return [fixed];
  if (arch === 'llama') return [undefined];
  const usual = defaultExperts(arch, hidden);
  return [usual / 4, usual / 2, usual, usual * 2].filter((count) => Number.isInteger(count) && count >= 2);
}

function bestWithShape(request: SizeRequest, hidden: number, experts: number | undefined): Candidate {
  const { arch, dtype, targetBytes } = request;
  const fixed = request.fixed ?? {};
  const base: DimChoices = {
    hidden,
    layers: 1,
    ...(experts === undefined ? {} : { experts }),
    ...(fixed.heads === undefined ? {} : { heads: fixed.heads }),
  };
  const usualVocab = fixed.vocab ?? defaultVocab(arch, hidden);
  const bytesAt = (layers: number, vocab: number): number =>
    modelTensorBytes(deriveDims(arch, { ...base, layers, vocab }), dtype);
  const layers = fixed.layers ?? closestLayers((count) => bytesAt(count, usualVocab), targetBytes, experts);
  const vocab = fixed.vocab ?? fitVocab(arch, hidden, targetBytes, (count) => bytesAt(layers, count));
  const dims = deriveDims(arch, { ...base, layers, vocab });
  const sizeError = Math.abs(modelTensorBytes(dims, dtype) - targetBytes) / targetBytes;
  // Deep enough to split over pipeline stages even when tiny; about hidden / 128 like Llama 3.
  const idealLayers = Math.min(128, Math.max(4, hidden / 128));
  let score = sizeError + 0.05 * Math.abs(Math.log2(layers / idealLayers));
  score += 0.02 * Math.abs(Math.log2(vocab / defaultVocab(arch, hidden)));
  if (experts !== undefined) score += 0.03 * Math.abs(Math.log2(experts / defaultExperts(arch, hidden)));
  if (sizeError > SIZE_ERROR_SOFT_MAX) score += 1;
  // Real models' head counts split over tp 2, 4 and 8; prefer a width whose heads do too.
  if (dims.heads % 8 !== 0) score += 0.2;
  return { dims, score };
}

/** Size grows with depth, so a binary search finds the first count at or above target; its neighbour may be closer. */
function closestLayers(bytesAt: (layers: number) => number, target: number, experts?: number): number {
  const max = Math.min(LAYERS_SEARCH_MAX, Math.floor(LAYER_EXPERTS_MAX / (experts ?? 1)));
  let low = 1;
  let high = max;
  while (low < high) {
    const middle = Math.floor((low + high) / 2);
    if (bytesAt(middle) >= target) high = middle;
    else low = middle + 1;
  }
  if (low > 1 && target - bytesAt(low - 1) < bytesAt(low) - target) return low - 1;
  return low;
}

/** Vocab size is linear in bytes (embedding plus output head), so one step is enough; realism bounds it. */
function fitVocab(
  arch: SynthArch,
  hidden: number,
  target: number,
  bytesAt: (vocab: number) => number,
): number {
  const usual = defaultVocab(arch, hidden);
  const perToken = (bytesAt(usual + 64) - bytesAt(usual)) / 64;
  const wanted = usual + (target - bytesAt(usual)) / perToken;
  const low = Math.max(VOCAB_MIN, Math.ceil(usual / 2 / 64) * 64);
  const high = Math.floor((usual * 1.25) / 64) * 64;
  return Math.min(high, Math.max(low, Math.round(wanted / 64) * 64));
}
