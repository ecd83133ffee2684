/**
 * The vocabulary of the seed tier's placement planner: a catalog snapshot (one model's pieces, who
 * holds each, at which version), the moves a re-layout is made of, and the limits the planner keeps.
 * Everything under `src/seed/plan` is pure: no I/O, no clock, no randomness; the same snapshot gives
 * the same plan byte for byte whatever order its nodes, pieces and replicas arrive in.
 */

/** A storage node of the seed tier. Inactive nodes hold data but take none, and are drained. */
export interface SeedNode {
  readonly name: string;
  readonly active: boolean;
}

/**
 * One catalog entry: a piece of the model (numbered 0..C-1 across its files, in offset order) and
 * the nodes that hold a verified copy. `holders[0]` is the primary (the copy readers use), the rest
 * are replicas (a set: their order carries no meaning). `version` grows by one with every commit.
 */
export interface PieceHolding {
  readonly index: number;
  readonly sizeBytes: number;
  readonly holders: readonly string[];
  readonly version: number;
}

/** What the planner reads: one model's entries and the nodes of the tier, in any order. */
export interface CatalogSnapshot {
  readonly model: string;
  readonly nodes: Iterable<SeedNode>;
  readonly pieces: Iterable<PieceHolding>;
}

/**
 * One step of a re-layout.
 * - `primary` / `replica`: copy the piece's bytes from `from` to `to` (which holds no copy), verify,
 *   commit the entry with `to` in place of `from` (in the same role), then delete the copy on `from`.
 * - `promote`: catalog only, no bytes: the replica on `to` becomes the primary and the old primary on
 *   `from` stays as a replica.
 * `expectVersion` is the entry's version the commit must find (compare-and-swap). When a plan moves
 * one piece several times, each later move expects one more (every commit adds one), so the moves of
 * a piece must be applied in plan order.
 */
export type MoveKind = 'primary' | 'replica' | 'promote';

export interface Move {
  readonly piece: number;
  readonly from: string;
  readonly to: string;
  readonly kind: MoveKind;
  readonly expectVersion: number;
}

export const DISTRIBUTE_MODES = ['primary', 'replica', 'round-robin'] as const;
export type DistributeMode = (typeof DISTRIBUTE_MODES)[number];

export const PLACEMENT_POLICIES = ['round-robin', 'balanced'] as const;
export type PlacementPolicy = (typeof PLACEMENT_POLICIES)[number];

/** Planner limits: the round-robin assignment costs O(K^3) and every plan holds the whole layout. */
export const SEED_NODES_MAX = 1024;
export const SEED_PIECES_MAX = 4_194_304;
/** Read windows the layout report measures unless told otherwise (pieces a reader has in flight). */
export const READ_WINDOWS_DEFAULT: readonly number[] = [8, 16];
