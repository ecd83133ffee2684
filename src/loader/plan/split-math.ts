/**
 * The arithmetic of splitting: a dimension among ranks (evenly as vLLM requires, or by weight in whole
 * units), KV heads that follow query heads, the padded vocabulary, pipeline layer ranges, experts
 * among expert groups, and FP8 block-scale ranges. Ranges are [start, end), end exclusive.
 */

import { WeightcastError } from '../../errors.js';

/** vLLM pads the vocabulary of embed_tokens and lm_head to a multiple of this before splitting it. */
export const VOCAB_PADDING = 64;

export type Span = [number, number];

export function padVocab(vocab: number): number {
  return Math.ceil(vocab / VOCAB_PADDING) * VOCAB_PADDING;
}

function indivisible(message: string, details: Record<string, unknown> = {}): WeightcastError {
  return new WeightcastError('PLAN_INDIVISIBLE', message, details);
}

/**
 * Whole `units` shared in proportion to integer `weights` by largest remainder: each part gets the
 * floor of its quota, then the parts with the largest remainders get one more, ties to the lower
 * index. With equal weights that gives the first `units % parts` parts one extra, as vLLM places
 * experts.
 */
export function apportion(units: number, weights: readonly number[]): number[] {
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  const counts = weights.map((weight) => Math.floor((units * weight) / total));
  const remainders = weights.map((weight, index) => ({ index, remainder: (units * weight) % total }));
  remainders.sort((a, b) => b.remainder - a.remainder || a.index - b.index);
  let left = units - counts.reduce((sum, count) => sum + count, 0);
  for (const { index } of remainders) {
    if (left === 0) break;
    counts[index] = (counts[index] ?? 0) + 1;
    left--;
  }
  return counts;
}

export function spansFromCounts(counts: readonly number[]): Span[] {
  let start = 0;
  return counts.map((count) => {
    const span: Span = [start, start + count];
    start += count;
    return span;
  });
}

export interface SplitRequest {
  /** Length of the dimension (heads, rows or padded vocabulary). */
  size: number;
  /** Weighted splits hand out whole units of this many elements; the last unit may be partial. */
  unit: number;
  /** Relative rank sizes, or null for an even split. */
  weights: readonly number[] | null;
  parts: number;
  /** Names the dimension in errors: "query heads of model.layers.0.self_attn.q_proj.weight". */
  what: string;
}

/**
 * An even split needs `size` divisible by `parts`, as vLLM's `divide` asserts. A weighted split
 * apportions whole units and refuses weights that would leave a rank with nothing.
 */
export function splitSpans(request: SplitRequest): Span[] {
  const { size, unit, weights, parts, what } = request;
  if (weights === null) {
    if (size % parts !== 0) {
      throw indivisible(`${what}: ${size} does not split evenly over ${parts} ranks`, { size, parts });
    }
    return spansFromCounts(new Array<number>(parts).fill(size / parts));
  }
  const units = Math.ceil(size / unit);
  const counts = apportion(units, weights);
  const empty = counts.findIndex((count) => count === 0);
  if (empty !== -1) {
    throw indivisible(
      `${what}: weights ${weights.join(',')} leave rank ${empty} none of the ${units} units of ${unit}`,
      { size, unit, weights: [...weights] },
    );
  }
  return spansFromCounts(counts).map(([start, end]) => [start * unit, Math.min(size, end * unit)]);
}

/**
 * KV heads follow the query heads they serve: a rank holding query heads [a, b) needs KV heads
 * [a / g, ceil(b / g)) where g query heads share one KV head. For an even split this is vLLM's rule:
 * kv_heads / tp heads each when tp divides them, otherwise (tp a multiple of kv_heads) one KV head
 * replicated on tp / kv_heads consecutive ranks.
 */
export function kvSpanFor(querySpan: Span, heads: number, kvHeads: number): Span {
  const group = heads / kvHeads;
  return [Math.floor(querySpan[0] / group), Math.ceil(querySpan[1] / group)];
}

/** vLLM accepts KV heads that tp divides or that divide tp; anything else it refuses. */
export function checkEvenKvHeads(kvHeads: number, parts: number, what: string): void {
  if (kvHeads % parts !== 0 && parts % kvHeads !== 0) {
    throw indivisible(`${what}: ${kvHeads} KV heads neither divide nor are divided by ${parts} ranks`, {
      kvHeads,
      parts,
    });
  }
}

/**
 * Decoder layers per pipeline stage, as vLLM's get_pp_indices: an equal share each, and the remainder
 * one layer at a time to the stages before the last, last-but-one first (the first stage carries the
 * embeddings and the last the head, so extra layers go to the middle when they can).
 */
export function pipelineSpans(layers: number, stages: number): Span[] {
  const counts = new Array<number>(stages).fill(Math.floor(layers / stages));
  const remainder = layers % stages;
  for (let extra = 0; extra < remainder; extra++) {
    const stage = stages - 2 - extra;
    counts[stage] = (counts[stage] ?? 0) + 1;
  }
  return spansFromCounts(counts);
}

/**
 * The elements of a block-scale tensor a weight slice needs: blocks [start / block, ceil(end / block)).
 * The slice must start on a block boundary and end on one (or at the end of the dimension); otherwise
 * two ranks would share a scale block and neither could dequantise its part exactly.
 */
export function blockSpan(span: Span, size: number, block: number, what: string): Span {
  const [start, end] = span;
  if (start % block !== 0 || (end % block !== 0 && end !== size)) {
    throw new WeightcastError(
      'PLAN_BLOCK_MISALIGNED',
      `${what}: slice [${start}, ${end}) of ${size} does not fall on ${block}-element FP8 blocks`,
      { start, end, size, block },
    );
  }
  return [start / block, Math.ceil(end / block)];
}

export function greatestCommonDivisor(a: number, b: number): number {
  let x = a;
  let y = b;
  while (y !== 0) [x, y] = [y, x % y];
  return x;
}

export function leastCommonMultiple(a: number, b: number): number {
  return (a / greatestCommonDivisor(a, b)) * b;
}
