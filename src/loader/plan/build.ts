/**
 * The plan builder: a model's tensor index, its config values and a parallel layout in; for every
 * rank, the tensors it holds (whole or one slice), the source byte ranges of each, and totals out.
 *
 * Flow: the rules (rules.ts) name each tensor's role; the topology (topology.ts) places ranks in
 * stages, tensor-parallel groups and expert groups; the split math (split-math.ts) turns roles into
 * spans, computed once per distinct split and shared by every tensor that uses it; byte-ranges.ts turns
 * each slice into file ranges. Pure and deterministic: the same input always gives the same plan.
 */

import { WeightcastError } from '../../errors.js';
import { runBytes, runRangeCount, sliceRuns, sliceShape } from './byte-ranges.js';
import { blockSizeOrDefault } from './model-config.js';
import { tensorRule, type Home, type TensorRule } from './rules.js';
import {
  VOCAB_PADDING,
  apportion,
  blockSpan,
  checkEvenKvHeads,
  greatestCommonDivisor,
  kvSpanFor,
  leastCommonMultiple,
  padVocab,
  pipelineSpans,
  spansFromCounts,
  splitSpans,
  type Span,
} from './split-math.js';
import {
  expertGroupWeights,
  expertMemberWeights,
  rankPosition,
  resolveTopology,
  type RankPosition,
  type Topology,
} from './topology.js';
import type {
  ParallelPlan,
  ParallelismOptions,
  PlanModel,
  RankPlan,
  RankTensor,
  SourceTensor,
  TensorSlice,
} from './types.js';

/** Weighted splits of MLP rows hand out whole units of this many rows (or of the FP8 block, if larger). */
export const WEIGHTED_ROW_UNIT = 32;
/** How many unknown names an error message lists; the error's details carry them all. */
const UNKNOWN_SHOWN_MAX = 10;

export interface PlanInput {
  tensors: readonly SourceTensor[];
  model: PlanModel;
}

/** A rule that places the tensor on some ranks. */
type PlacedRule = Exclude<TensorRule, { kind: 'skip' | 'unknown' }>;

interface Classified {
  tensor: SourceTensor;
  rule: PlacedRule;
}

export function buildParallelPlan(input: PlanInput, options: ParallelismOptions): ParallelPlan {
  const { model } = input;
  const topology = resolveTopology(options, model);
  const { classified, skipped, warnings } = classify(input, options.unknownTensors ?? 'error');
  const splits = new SplitCache(model, topology);
  const byName = new Map(input.tensors.map((tensor) => [tensor.name, tensor]));
  const ranks: RankPlan[] = [];
  for (let rank = 0; rank < topology.world; rank++) {
    ranks.push(planRank(rankPosition(topology, rank), classified, byName, splits));
  }
  return {
    architecture: model.architecture,
    tp: topology.tp,
    pp: topology.pp,
    ep: topology.ep,
    ranksPerStage: topology.ranksPerStage,
    weights: topology.weights,
    vocab: { size: model.vocabSize, padded: padVocab(model.vocabSize) },
    ranks,
    skipped,
    warnings,
    modelBytes: input.tensors.reduce((total, tensor) => total + (tensor.end - tensor.start), 0),
  };
}

function classify(
  input: PlanInput,
  unknownPolicy: 'error' | 'replicate',
): { classified: Classified[]; skipped: string[]; warnings: string[] } {
  const ordered = [...input.tensors].sort((a, b) => compare(a.file, b.file) || a.start - b.start);
  const classified: Classified[] = [];
  const skipped: string[] = [];
  const unknown: string[] = [];
  for (const tensor of ordered) {
    const rule = tensorRule(tensor.name, tensor.shape, input.model);
    if (rule.kind === 'skip') {
      skipped.push(tensor.name);
    } else if (rule.kind === 'unknown') {
      unknown.push(tensor.name);
      const everywhere: PlacedRule = { kind: 'replicated', home: { kind: 'everywhere' }, expert: null };
      classified.push({ tensor, rule: everywhere });
    } else {
      checkExpert(rule, tensor.name, input.model);
      classified.push({ tensor, rule });
    }
  }
  if (unknown.length > 0 && unknownPolicy === 'error') {
    const shown = unknown.slice(0, UNKNOWN_SHOWN_MAX).join(', ');
    const more = unknown.length > UNKNOWN_SHOWN_MAX ? ` and ${unknown.length - UNKNOWN_SHOWN_MAX} more` : '';
    throw new WeightcastError(
      'PLAN_UNKNOWN_TENSOR',
      `no ${input.model.architecture} parallelism rule covers ${unknown.length} tensor(s): ${shown}${more}`,
      { tensors: unknown },
    );
  }
  const warnings = unknown.map((name) => `${name}: no parallelism rule; replicated on every rank`);
  return { classified, skipped, warnings };
}

function checkExpert(rule: PlacedRule, name: string, model: PlanModel): void {
  if (rule.expert !== null && rule.expert >= model.experts) {
    throw new WeightcastError(
      'PLAN_SHAPE_MISMATCH',
      `tensor ${name}: expert ${rule.expert} but the config has ${model.experts} experts`,
      { tensor: name },
    );
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function planRank(
  position: RankPosition,
  classified: readonly Classified[],
  byName: ReadonlyMap<string, SourceTensor>,
  splits: SplitCache,
): RankPlan {
  const layers = splits.stageLayers(position.stage);
  const experts = splits.groupExperts(position.expertGroup);
  const tensors: RankTensor[] = [];
  for (const { tensor, rule } of classified) {
    if (!splits.holds(position, rule.home, rule.expert)) continue;
    const slice = sliceFor(tensor, rule, position, byName, splits);
    const ranges = sliceRuns(tensor, slice);
    tensors.push({
      name: tensor.name,
      file: tensor.file,
      dtype: tensor.dtype,
      shape: [...tensor.shape],
      slice,
      sliceShape: sliceShape(tensor.shape, slice),
      bytes: runBytes(ranges),
      ranges,
    });
  }
  return {
    rank: position.rank,
    stage: position.stage,
    tpRank: position.tpRank,
    expertGroup: position.expertGroup,
    expertRank: position.expertRank,
    layers,
    experts,
    tensors,
    totals: totalsOf(tensors),
  };
}

function totalsOf(tensors: readonly RankTensor[]): RankPlan['totals'] {
  const sliced = tensors.filter((tensor) => tensor.slice !== null);
  const sliceBytes = sliced.reduce((total, tensor) => total + tensor.bytes, 0);
  const sourceBytes = tensors.reduce((total, tensor) => total + tensor.bytes, 0);
  return {
    tensors: tensors.length,
    slicedTensors: sliced.length,
    replicatedTensors: tensors.length - sliced.length,
    sliceBytes,
    replicatedBytes: sourceBytes - sliceBytes,
    sourceBytes,
    rangeCount: tensors.reduce((total, tensor) => total + runRangeCount(tensor.ranges), 0),
  };
}

function sliceFor(
  tensor: SourceTensor,
  rule: PlacedRule,
  position: RankPosition,
  byName: ReadonlyMap<string, SourceTensor>,
  splits: SplitCache,
): TensorSlice | null {
  if (rule.kind === 'replicated') return null;
  if (rule.kind === 'split') return splits.wholeOrSlice(tensor, rule, position);
  const weight = byName.get(rule.weight);
  if (weight === undefined) {
    throw new WeightcastError(
      'PLAN_SHAPE_MISMATCH',
      `tensor ${tensor.name}: block scales without their weight ${rule.weight}`,
      {
        tensor: tensor.name,
      },
    );
  }
  const weightRule = tensorRule(weight.name, weight.shape, splits.model);
  if (weightRule.kind !== 'split') return null;
  const weightSlice = splits.wholeOrSlice(weight, weightRule, position);
  return weightSlice === null ? null : splits.scaleSlice(tensor, weight, weightSlice);
}

function shapeMismatch(tensor: SourceTensor, problem: string): WeightcastError {
  return new WeightcastError(
    'PLAN_SHAPE_MISMATCH',
    `tensor ${tensor.name} ${JSON.stringify(tensor.shape)}: ${problem}`,
    {
      tensor: tensor.name,
    },
  );
}

/** Spans computed once per distinct split (axis, size, group) and shared by every tensor using it. */
class SplitCache {
  private readonly spans = new Map<string, Span[]>();
  private readonly stages: Span[];
  private readonly expertSpans: Span[];
  private readonly block: [number, number];
  private readonly blockQuantised: boolean;

  constructor(
    readonly model: PlanModel,
    private readonly topology: Topology,
  ) {
    this.stages = pipelineSpans(model.layers, topology.pp);
    this.expertSpans = model.experts === 0 ? [] : this.splitExperts();
    this.block = blockSizeOrDefault(model);
    this.blockQuantised = model.blockSize !== null;
    if (topology.weights === null && model.kvHeads < model.heads) {
      checkEvenKvHeads(model.kvHeads, topology.tp, 'key/value heads');
    }
  }

  private splitExperts(): Span[] {
    const counts = apportion(this.model.experts, expertGroupWeights(this.topology));
    const empty = counts.findIndex((count) => count === 0);
    if (empty !== -1) {
      throw new WeightcastError(
        'PLAN_INDIVISIBLE',
        `${this.model.experts} experts leave expert group ${empty} of ${this.topology.ep} without one`,
        { experts: this.model.experts, ep: this.topology.ep },
      );
    }
    return spansFromCounts(counts);
  }

  stageLayers(stage: number): Span {
    return this.stages[stage] ?? [0, 0];
  }

  groupExperts(group: number): Span {
    return this.expertSpans[group] ?? [0, 0];
  }

  holds(position: RankPosition, home: Home, expert: number | null): boolean {
    if (expert !== null) {
      const [first, end] = this.groupExperts(position.expertGroup);
      if (expert < first || expert >= end) return false;
    }
    const lastStage = this.topology.pp - 1;
    switch (home.kind) {
      case 'layer': {
        const [start, end] = this.stageLayers(position.stage);
        return home.layer >= start && home.layer < end;
      }
      case 'first':
        return position.stage === 0;
      case 'last':
        return position.stage === lastStage;
      case 'embedding':
        return position.stage === 0 || (this.model.tieWordEmbeddings && position.stage === lastStage);
      case 'everywhere':
        return true;
    }
  }

  slice(
    tensor: SourceTensor,
    rule: Extract<TensorRule, { kind: 'split' }>,
    position: RankPosition,
  ): TensorSlice {
    const size = tensor.shape[rule.dim];
    if (size === undefined) throw shapeMismatch(tensor, `has no dim ${rule.dim} to split`);
    if (rule.axis === 'vocab') return this.vocabSlice(tensor, size, position);
    const span = this.elementSpan(tensor, rule, size, position);
    return { dim: rule.dim, start: span[0], length: span[1] - span[0] };
  }

  /** A split that hands one rank everything (tp 1, or an expert group of one) holds the tensor whole. */
  wholeOrSlice(
    tensor: SourceTensor,
    rule: Extract<TensorRule, { kind: 'split' }>,
    position: RankPosition,
  ): TensorSlice | null {
    const slice = this.slice(tensor, rule, position);
    const whole = slice.padded === undefined && slice.start === 0 && slice.length === tensor.shape[slice.dim];
    return whole ? null : slice;
  }

  private elementSpan(
    tensor: SourceTensor,
    rule: Extract<TensorRule, { kind: 'split' }>,
    size: number,
    position: RankPosition,
  ): Span {
    if (rule.axis === 'rows') return this.rowSpan(tensor, size, rule.expert, position);
    const heads = rule.axis === 'qHeads' ? this.model.heads : this.model.kvHeads;
    const width = rule.headWidth ?? size / heads;
    if (size !== heads * width)
      throw shapeMismatch(tensor, `dim ${rule.dim} should be ${heads} heads of ${width}`);
    const querySpan = this.headSpans()[position.tpRank] ?? [0, 0];
    const headSpan =
      rule.axis === 'qHeads' ? querySpan : kvSpanFor(querySpan, this.model.heads, this.model.kvHeads);
    return [headSpan[0] * width, headSpan[1] * width];
  }

  private headSpans(): Span[] {
    return this.cached('heads', () =>
      splitSpans({
        size: this.model.heads,
        unit: this.headGranule(),
        weights: this.topology.weights,
        parts: this.topology.tp,
        what: 'attention heads',
      }),
    );
  }

  /**
   * Weighted splits hand out heads in groups whose rows fill whole FP8 blocks in every projection that
   * splits by head, so block scales never straddle two ranks.
   */
  private headGranule(): number {
    if (!this.blockQuantised) return 1;
    const mla = this.model.latentAttention;
    const widths =
      mla === null
        ? [this.model.headDim]
        : [mla.qkNopeHeadDim + mla.qkRopeHeadDim, mla.qkNopeHeadDim + mla.vHeadDim, mla.vHeadDim];
    let granule = 1;
    for (const width of widths) {
      for (const block of this.block)
        granule = leastCommonMultiple(granule, block / greatestCommonDivisor(width, block));
    }
    return granule;
  }

  private rowSpan(tensor: SourceTensor, size: number, expert: number | null, position: RankPosition): Span {
    const inExpertGroup = expert !== null;
    const group = inExpertGroup ? position.expertGroup : 0;
    const key = `rows:${size}:${inExpertGroup ? `expert-group-${group}` : 'tp'}`;
    const spans = this.cached(key, () =>
      splitSpans({
        size,
        unit: this.blockQuantised
          ? leastCommonMultiple(WEIGHTED_ROW_UNIT, leastCommonMultiple(...this.block))
          : WEIGHTED_ROW_UNIT,
        weights: inExpertGroup ? expertMemberWeights(this.topology, group) : this.topology.weights,
        parts: inExpertGroup ? this.topology.expertGroupSize : this.topology.tp,
        what: `rows of ${tensor.name}`,
      }),
    );
    return spans[inExpertGroup ? position.expertRank : position.tpRank] ?? [0, 0];
  }

  /**
   * embed_tokens and lm_head: the vocabulary padded to a multiple of 64 is split over the tp group;
   * each rank takes the real rows of its share and `padded` says how many rows the share has in all.
   * The last rank may hold fewer real rows (or none): the engine fills the rest with zeros.
   */
  private vocabSlice(tensor: SourceTensor, rows: number, position: RankPosition): TensorSlice {
    if (rows !== this.model.vocabSize)
      throw shapeMismatch(tensor, `has ${rows} rows but vocab_size is ${this.model.vocabSize}`);
    const spans = this.cached('vocab', () =>
      splitSpans({
        size: padVocab(rows),
        unit: VOCAB_PADDING,
        weights: this.topology.weights,
        parts: this.topology.tp,
        what: `padded vocabulary of ${tensor.name}`,
      }),
    );
    const [start, end] = spans[position.tpRank] ?? [0, 0];
    const realStart = Math.min(start, rows);
    return { dim: 0, start: realStart, length: Math.min(end, rows) - realStart, padded: end - start };
  }

  /** The block-scale slice that goes with a weight slice: the same dim, in blocks. */
  scaleSlice(scale: SourceTensor, weight: SourceTensor, weightSlice: TensorSlice): TensorSlice {
    const { dim } = weightSlice;
    const block = this.block[dim] ?? this.block[0];
    const weightSize = weight.shape[dim] ?? 0;
    const blocks = Math.ceil(weightSize / block);
    const shapeOk =
      scale.shape.length === weight.shape.length &&
      weight.shape.every(
        (size, index) => scale.shape[index] === Math.ceil(size / (this.block[index] ?? block)),
      );
    if (!shapeOk || scale.shape[dim] !== blocks) {
      throw shapeMismatch(
        scale,
        `is not the ${this.block.join('x')} block scales of ${weight.name} ${JSON.stringify(weight.shape)}`,
      );
    }
    const span = blockSpan(
      [weightSlice.start, weightSlice.start + weightSlice.length],
      weightSize,
      block,
      weight.name,
    );
    return { dim, start: span[0], length: span[1] - span[0] };
  }

  private cached(key: string, compute: () => Span[]): Span[] {
    let spans = this.spans.get(key);
    if (spans === undefined) {
      spans = compute();
      this.spans.set(key, spans);
    }
    return spans;
  }
}
