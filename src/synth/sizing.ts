/**
 * Chooses realistic dimensions for a requested model size. The search walks a ladder of real hidden
 * sizes (and, for mixture-of-experts models, expert counts near the usual one for that width), finds the
 * layer count that comes closest to the target, then fine-tunes the vocab size (in steps of 64) to land
 * near the exact byte count. Among the candidates it prefers a small size error first and a realistic
 * depth-to-width ratio second. Dimensions the caller fixes are never changed.
 *
 * The result is always within SIZE_TOLERANCE of the target, or the request is refused with the size
 * the nearest model would have had. When no usual shape gets there (the caller fixed dimensions that
 * pull away from the target), a second, stretched search also tries widths made of the fixed head
 * count, any expert count and any vocab size. Block-quantised FP8 models are first sized with widths
 * that split over 8 tensor-parallel ranks, then 4, 2 and 1, the first that fits the target. Pure.
 */

import { isWeightcastError } from '../errors.js';
import { formatBytes } from '../util/units.js';
import {
  EXPERTS_MAX,
  FP8_SPLIT_RANKS_MAX,
  HIDDEN_MAX,
  LAYER_EXPERTS_MAX,
  VOCAB_MAX,
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
/** Head widths tried with a fixed head count when the usual widths miss the target (RoPE needs even). */
const HEAD_DIM_LADDER = [2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512];
/** Expert counts tried, beside the usual ones, when the usual shapes miss the target. */
const EXPERTS_LADDER = [2, 4, 8, 16, 32, 64, 128, 256];
const LAYERS_SEARCH_MAX = 160;
/** A chosen model's tensor bytes are within this fraction of the target, or the request is refused. */
export const SIZE_TOLERANCE = 0.1;
/** A candidate further than this from the target loses to any closer one, however realistic. */
const SIZE_ERROR_SOFT_MAX = 0.05;

export interface SizeRequest {
  arch: SynthArch;
  dtype: SynthDtype;
  targetBytes: number;
  /** Dimensions fixed by the caller; the search chooses only the others. */
  fixed?: Partial<DimChoices>;
}

/** How far the search strays from usual proportions: only when the usual ones cannot reach the target. */
type Reach = 'usual' | 'stretched';

interface Candidate {
  dims: ModelDims;
  bytes: number;
  sizeError: number;
  score: number;
}

export function chooseDims(request: SizeRequest): ModelDims {
  if (!(Number.isFinite(request.targetBytes) && request.targetBytes > 0)) {
    throw invalidOptions(`size must be a positive number of bytes, got ${request.targetBytes}`);
  }
  let nearest: Candidate | undefined;
  let lastProblem: Error | undefined;
  for (const splitRanks of fp8SplitChoices(request)) {
    for (const reach of ['usual', 'stretched'] as const) {
      const found = searchShapes(request, reach, splitRanks);
      lastProblem = found.problem ?? lastProblem;
      const best = found.best;
      if (best === undefined) continue;
      if (best.sizeError <= SIZE_TOLERANCE) return best.dims;
      if (nearest === undefined || best.sizeError < nearest.sizeError) nearest = best;
    }
  }
  if (nearest === undefined) throw lastProblem ?? invalidOptions('no dimensions fit the requested size');
  throw unreachable(request, nearest);
}

/** Block-quantised FP8 splits over tensor parallelism only on whole blocks; the widest split first. */
function fp8SplitChoices(request: SizeRequest): (number | undefined)[] {
  const fixed = request.fixed?.fp8SplitRanks;
  if (fixed !== undefined) return [fixed];
  if (request.arch !== 'deepseek-v3' || request.dtype !== 'f8_e4m3') return [undefined];
  const choices: number[] = [];
  for (let ranks = FP8_SPLIT_RANKS_MAX; ranks >= 1; ranks /= 2) choices.push(ranks);
  return choices;
}

function searchShapes(
  request: SizeRequest,
  reach: Reach,
  splitRanks: number | undefined,
): { best?: Candidate; problem?: Error } {
  const fixed = request.fixed ?? {};
  let best: Candidate | undefined;
  let problem: Error | undefined;
  for (const hidden of hiddenCandidates(request.arch, fixed, reach)) {
    for (const experts of expertCandidates(request.arch, hidden, fixed.experts, reach)) {
      try {
        const candidate = bestWithShape(request, reach, { hidden, experts, splitRanks });
        if (best === undefined || candidate.score < best.score) best = candidate;
      } catch (error) {
        if (!isWeightcastError(error, 'SYNTH_INVALID_OPTIONS')) throw error;
        problem = error;
      }
    }
  }
  return { ...(best === undefined ? {} : { best }), ...(problem === undefined ? {} : { problem }) };
}

/**
 * The ladder, and when stretched and the head count is fixed, that many heads of each ladder width:
 * a fixed head count must divide the hidden size of llama and qwen2-moe (deepseek-v3's latent
 * attention has no such tie), which few ladder rungs may do.
 */
function hiddenCandidates(arch: SynthArch, fixed: Partial<DimChoices>, reach: Reach): number[] {
  if (fixed.hidden !== undefined) return [fixed.hidden];
  if (reach === 'usual' || fixed.heads === undefined || arch === 'deepseek-v3') return HIDDEN_LADDER;
  const heads = fixed.heads;
  const widths = HEAD_DIM_LADDER.map((headDim) => heads * headDim).filter((hidden) => hidden <= HIDDEN_MAX);
  return [...new Set([...HIDDEN_LADDER, ...widths])].sort((a, b) => a - b);
}

function expertCandidates(
  arch: SynthArch,
  hidden: number,
  fixed: number | undefined,
  reach: Reach,
): (number | undefined)[] {
  if (fixed !== undefined) return [fixed];
  if (arch === 'llama') return [undefined];
  const usual = defaultExperts(arch, hidden);
  const near = [usual / 4, usual / 2, usual, usual * 2];
  const counts = reach === 'usual' ? near : [...new Set([...near, ...EXPERTS_LADDER])];
  return counts.filter((count) => Number.isInteger(count) && count >= 2 && count <= EXPERTS_MAX);
}

interface Shape {
  hidden: number;
  experts: number | undefined;
  splitRanks: number | undefined;
}

function bestWithShape(request: SizeRequest, reach: Reach, shape: Shape): Candidate {
  const { arch, dtype, targetBytes } = request;
  const { hidden, experts, splitRanks } = shape;
  const fixed = request.fixed ?? {};
  const base: DimChoices = {
    hidden,
    layers: 1,
    ...(experts === undefined ? {} : { experts }),
    ...(fixed.heads === undefined ? {} : { heads: fixed.heads }),
    ...(splitRanks === undefined ? {} : { fp8SplitRanks: splitRanks }),
  };
  const usualVocab = fixed.vocab ?? defaultVocab(arch, hidden);
  const bytesAt = (layers: number, vocab: number): number =>
    modelTensorBytes(deriveDims(arch, { ...base, layers, vocab }), dtype);
  const layers = fixed.layers ?? closestLayers((count) => bytesAt(count, usualVocab), targetBytes, experts);
  const vocab =
    fixed.vocab ?? fitVocab(vocabRange(arch, hidden, reach), targetBytes, (count) => bytesAt(layers, count));
  const dims = deriveDims(arch, { ...base, layers, vocab });
  const bytes = modelTensorBytes(dims, dtype);
  const sizeError = Math.abs(bytes - targetBytes) / targetBytes;
  return { dims, bytes, sizeError, score: sizeError + realismPenalty(dims, sizeError) };
}

function realismPenalty(dims: ModelDims, sizeError: number): number {
  const { arch, hidden, layers, vocab } = dims;
  // Deep enough to split over pipeline stages even when tiny; about hidden / 128 like Llama 3.
  const idealLayers = Math.min(128, Math.max(4, hidden / 128));
  let penalty = 0.05 * Math.abs(Math.log2(layers / idealLayers));
  penalty += 0.02 * Math.abs(Math.log2(vocab / defaultVocab(arch, hidden)));
  if (arch !== 'llama') penalty += 0.03 * Math.abs(Math.log2(dims.experts / defaultExperts(arch, hidden)));
  // Real heads are 64 or 128 wide (deepseek-v3's latent attention sets its own head widths).
  if (arch !== 'deepseek-v3') {
    penalty +=
      0.05 * Math.min(Math.abs(Math.log2(dims.headDim / 64)), Math.abs(Math.log2(dims.headDim / 128)));
  }
  if (sizeError > SIZE_ERROR_SOFT_MAX) penalty += 1;
  // Real models' head counts split over tp 2, 4 and 8; prefer a width whose heads do too.
  if (dims.heads % 8 !== 0) penalty += 0.2;
  return penalty;
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

/** Usually from half to 1.25 times the width's usual vocab; stretched, anything the format allows. */
function vocabRange(
  arch: SynthArch,
  hidden: number,
  reach: Reach,
): { usual: number; low: number; high: number } {
  const usual = defaultVocab(arch, hidden);
  if (reach === 'stretched') return { usual, low: VOCAB_MIN, high: VOCAB_MAX };
  return {
    usual,
    low: Math.max(VOCAB_MIN, Math.ceil(usual / 2 / 64) * 64),
    high: Math.floor((usual * 1.25) / 64) * 64,
  };
}

/** Vocab size is linear in bytes (embedding plus output head), so one step is enough. */
function fitVocab(
  range: { usual: number; low: number; high: number },
  target: number,
  bytesAt: (vocab: number) => number,
): number {
  const { usual, low, high } = range;
  const perToken = (bytesAt(usual + 64) - bytesAt(usual)) / 64;
  const wanted = usual + (target - bytesAt(usual)) / perToken;
  const lowest = Math.ceil(low / 64) * 64;
  const highest = Math.floor(high / 64) * 64;
  return Math.min(highest, Math.max(lowest, Math.round(wanted / 64) * 64));
}

/** The refusal: which fixed dimensions keep the size away, and the size of the nearest model. */
function unreachable(request: SizeRequest, nearest: Candidate): Error {
  const { arch, dtype, targetBytes } = request;
  const fixed = Object.entries(request.fixed ?? {})
    .filter(([, value]) => value !== undefined)
    .map(([name, value]) => `${name} ${value}`);
  const { hidden, layers, vocab } = nearest.dims;
  const nearestText =
    `${formatBytes(nearest.bytes)} (hidden ${hidden}, layers ${layers}` +
    `${nearest.dims.arch === 'llama' ? '' : `, experts ${nearest.dims.experts}`}, vocab ${vocab})`;
  const wanted = `a ${arch} ${dtype} model within ${SIZE_TOLERANCE * 100}% of ${formatBytes(targetBytes)}`;
  const direction = nearest.bytes > targetBytes ? 'larger' : 'smaller';
  if (fixed.length === 0) {
    return invalidOptions(
      `cannot make ${wanted}: the nearest synth makes is ${nearestText}; ask for a ${direction} size`,
    );
  }
  const advice =
    nearest.bytes > targetBytes
      ? 'ask for a larger size, or give smaller or fewer dimensions'
      : 'ask for a smaller size, or give larger or fewer dimensions';
  return invalidOptions(
    `cannot make ${wanted} with ${fixed.join(', ')}: the nearest model with those is ${nearestText}; ${advice}`,
  );
}
