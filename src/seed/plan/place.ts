/**
 * Initial placement for `put`: which nodes receive each piece as the model is loaded into the tier.
 * - `round-robin`: piece i's primary on node (i mod K) of the given order and its R replicas on the
 *   next R nodes, so consecutive pieces sit on different nodes and a streaming reader uses them all.
 * - `balanced`: each piece's primary on the node with the fewest primaries, each replica on the node
 *   with the fewest copies (then fewest bytes); ties go to a seeded hash of (piece, node), so the
 *   counts come out even without tying the layout to file offsets.
 * Never two copies of a piece on one node; R + 1 nodes at least.
 */

import { WeightcastError } from '../../errors.js';
import { compareNames } from './layout.js';
import {
  PLACEMENT_POLICIES,
  SEED_NODES_MAX,
  SEED_PIECES_MAX,
  type CatalogSnapshot,
  type PieceHolding,
  type PlacementPolicy,
  type SeedNode,
} from './types.js';

export interface PlacementOptions {
  readonly policy: PlacementPolicy;
  /** Extra copies per piece beyond the primary. */
  readonly replicas: number;
  /** Seed for `balanced` tie-breaks; the same seed gives the same layout. */
  readonly seed?: number;
}

export function isPlacementPolicy(value: string): value is PlacementPolicy {
  return (PLACEMENT_POLICIES as readonly string[]).includes(value);
}

/** Holders per piece (primary first) for pieces of the given sizes over `nodes`, in that order. */
export function placePieces(
  sizes: readonly number[],
  nodes: readonly string[],
  options: PlacementOptions,
): string[][] {
  checkPlacement(sizes, nodes, options);
  const holders =
    options.policy === 'round-robin'
      ? placeRoundRobin(sizes.length, nodes.length, options.replicas)
      : placeBalanced(sizes, nodes.length, options.replicas, options.seed ?? 0);
  return holders.map((list) => list.map((node) => nodes[node]!));
}

/** A catalog snapshot of a fresh placement over active `nodes`, every entry at version 1. */
export function placeSnapshot(
  model: string,
  nodes: readonly SeedNode[],
  sizes: readonly number[],
  options: PlacementOptions,
): CatalogSnapshot {
  const active = nodes.filter((node) => node.active).map((node) => node.name);
  const holders = placePieces(sizes, active, options);
  const pieces: PieceHolding[] = holders.map((list, index) => ({
    index,
    sizeBytes: sizes[index]!,
    holders: [list[0]!, ...list.slice(1).sort(compareNames)],
    version: 1,
  }));
  return { model, nodes: [...nodes], pieces };
}

function checkPlacement(sizes: readonly number[], nodes: readonly string[], options: PlacementOptions): void {
  if (nodes.length > SEED_NODES_MAX || sizes.length > SEED_PIECES_MAX) {
    throw new WeightcastError(
      'LIMIT_EXCEEDED',
      `placement limits are ${SEED_NODES_MAX} nodes and ${SEED_PIECES_MAX} pieces`,
    );
  }
  if (new Set(nodes).size !== nodes.length || nodes.some((name) => name.length === 0)) {
    throw new WeightcastError('SEED_PLAN_INVALID', 'node names must be distinct and not empty');
  }
  if (sizes.some((size) => !Number.isSafeInteger(size) || size < 0)) {
    throw new WeightcastError('SEED_PLAN_INVALID', 'piece sizes must be non-negative integers');
  }
  if (!Number.isSafeInteger(options.replicas) || options.replicas < 0) {
    throw new WeightcastError('SEED_PLAN_INVALID', `replicas must be a non-negative integer`);
  }
  if (options.replicas + 1 > nodes.length) {
    throw new WeightcastError(
      'SEED_PLACEMENT_IMPOSSIBLE',
      `${options.replicas + 1} copies per piece need at least as many active nodes; there are ${nodes.length}`,
      { replicas: options.replicas, nodes: nodes.length },
    );
  }
}

function placeRoundRobin(pieceCount: number, nodeCount: number, replicas: number): number[][] {
  const holders: number[][] = [];
  for (let piece = 0; piece < pieceCount; piece++) {
    const list: number[] = [];
    for (let copy = 0; copy <= replicas; copy++) list.push((piece + copy) % nodeCount);
    holders.push(list);
  }
  return holders;
}

function placeBalanced(
  sizes: readonly number[],
  nodeCount: number,
  replicas: number,
  seed: number,
): number[][] {
  const primaries = new Array<number>(nodeCount).fill(0);
  const primaryBytes = new Array<number>(nodeCount).fill(0);
  const copies = new Array<number>(nodeCount).fill(0);
  const copyBytes = new Array<number>(nodeCount).fill(0);
  const holders: number[][] = [];
  sizes.forEach((size, piece) => {
    const list: number[] = [];
    const pick = (count: readonly number[], bytes: readonly number[]): number => {
      let best = -1;
      let bestHash = 0;
      for (let node = 0; node < nodeCount; node++) {
        if (list.includes(node)) continue;
        const hash = mix32(seed, piece, node);
        if (
          best < 0 ||
          count[node]! < count[best]! ||
          (count[node] === count[best] &&
            (bytes[node]! < bytes[best]! || (bytes[node] === bytes[best] && hash < bestHash)))
        ) {
          best = node;
          bestHash = hash;
        }
      }
      list.push(best);
      copies[best]!++;
      copyBytes[best]! += size;
      return best;
    };
    const primary = pick(primaries, primaryBytes);
    primaries[primary]!++;
    primaryBytes[primary]! += size;
    for (let copy = 0; copy < replicas; copy++) pick(copies, copyBytes);
    holders.push(list);
  });
  return holders;
}

/** A 32-bit hash of three integers (splitmix32 finaliser rounds): a seeded, stateless tie-break order. */
export function mix32(seed: number, a: number, b: number): number {
  let z = (seed | 0) ^ Math.imul(a + 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 0x7f4a7c15, 0xc2b2ae35);
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}
