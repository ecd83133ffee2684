/**
 * How ranks are numbered and grouped. A plan has `pp` pipeline stages of W = max(tp, ep) ranks each;
 * global rank = stage x W + local rank, as vLLM numbers them (pipeline outermost).
 *
 * - Attention, dense MLPs, shared experts and the vocabulary split over the tensor-parallel group: the
 *   local rank modulo tp. When ep > tp the extra ranks are data-parallel copies of that group
 *   (DeepSeek-style "DP attention + EP experts").
 * - Routed experts split over ep expert groups of W / ep consecutive local ranks: each group holds a
 *   contiguous range of whole experts, tensor-parallel inside the group when it has more than one rank.
 *   ep = tp gives vLLM's expert parallelism (every rank holds whole experts); ep = 1 gives plain
 *   tensor parallelism of every expert.
 */

import { WeightcastError } from '../../errors.js';
import type { ParallelismOptions, PlanModel } from './types.js';

/** Far beyond any deployment; past this the options are a mistake. */
export const RANKS_MAX = 65536;
export const WEIGHT_MAX = 1_000_000;

export interface Topology {
  tp: number;
  pp: number;
  ep: number;
  ranksPerStage: number;
  world: number;
  /** Local ranks per expert group: ranksPerStage / ep. */
  expertGroupSize: number;
  /** Relative size of each tensor-parallel rank, or null for even splits. */
  weights: number[] | null;
}

export interface RankPosition {
  rank: number;
  stage: number;
  local: number;
  tpRank: number;
  expertGroup: number;
  expertRank: number;
}

function invalid(message: string): WeightcastError {
  return new WeightcastError('PLAN_INVALID_OPTIONS', message);
}

function positiveInteger(value: number | undefined, what: string, fallback: number): number {
  const resolved = value ?? fallback;
  if (!Number.isSafeInteger(resolved) || resolved < 1 || resolved > RANKS_MAX) {
    throw invalid(`${what} must be an integer from 1 to ${RANKS_MAX}, got ${String(resolved)}`);
  }
  return resolved;
}

export function resolveTopology(options: ParallelismOptions, model: PlanModel): Topology {
  const tp = positiveInteger(options.tp, 'tp', 1);
  const pp = positiveInteger(options.pp, 'pp', 1);
  const ep = positiveInteger(options.ep, 'ep', 1);
  if (tp % ep !== 0 && ep % tp !== 0) {
    throw invalid(`ep ${ep} and tp ${tp}: one must divide the other`);
  }
  if (ep > 1 && model.experts === 0)
    throw invalid(`ep ${ep} asks for expert parallelism, but ${model.architecture} has no experts`);
  if (pp > model.layers) throw invalid(`pp ${pp} is more stages than the model's ${model.layers} layers`);
  const ranksPerStage = Math.max(tp, ep);
  if (ranksPerStage * pp > RANKS_MAX) throw invalid(`${ranksPerStage * pp} ranks is more than ${RANKS_MAX}`);
  return {
    tp,
    pp,
    ep,
    ranksPerStage,
    world: ranksPerStage * pp,
    expertGroupSize: ranksPerStage / ep,
    weights: resolveWeights(options.weights, tp),
  };
}

function resolveWeights(weights: readonly number[] | undefined, tp: number): number[] | null {
  if (weights === undefined) return null;
  if (weights.length !== tp) throw invalid(`weights name ${weights.length} ranks but tp is ${tp}`);
  for (const weight of weights) {
    if (!Number.isSafeInteger(weight) || weight < 1 || weight > WEIGHT_MAX) {
      throw invalid(`weights must be integers from 1 to ${WEIGHT_MAX}, got ${weights.join(',')}`);
    }
  }
  return [...weights];
}

export function rankPosition(topology: Topology, rank: number): RankPosition {
  const stage = Math.floor(rank / topology.ranksPerStage);
  const local = rank % topology.ranksPerStage;
  return {
    rank,
    stage,
    local,
    tpRank: local % topology.tp,
    expertGroup: Math.floor(local / topology.expertGroupSize),
    expertRank: local % topology.expertGroupSize,
  };
}

/** The weight of a local rank: that of its tensor-parallel rank (data-parallel copies weigh the same). */
function localWeight(topology: Topology, local: number): number {
  return topology.weights?.[local % topology.tp] ?? 1;
}

/** Weights of the members of one expert group, in expert-rank order; null for even splits. */
export function expertMemberWeights(topology: Topology, group: number): number[] | null {
  if (topology.weights === null) return null;
  const first = group * topology.expertGroupSize;
  return Array.from({ length: topology.expertGroupSize }, (_, member) =>
    localWeight(topology, first + member),
  );
}

/** Each expert group's share of the experts: the summed weights of its members (all 1 when even). */
export function expertGroupWeights(topology: Topology): number[] {
  return Array.from({ length: topology.ep }, (_, group) => {
    let total = 0;
    for (let member = 0; member < topology.expertGroupSize; member++) {
      total += localWeight(topology, group * topology.expertGroupSize + member);
    }
    return topology.weights === null ? 1 : total;
  });
}
