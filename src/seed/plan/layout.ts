/**
 * The planner's working copy of a snapshot: nodes numbered by name order, pieces by index, holders
 * as node numbers (primary first, replicas ascending), and per-node counts kept in step with every
 * move. `Layout.from` validates and canonicalises its input, which is what makes plans independent
 * of the order the caller's maps and sets happened to iterate in.
 */

import { WeightcastError, assert } from '../../errors.js';
import {
  SEED_NODES_MAX,
  SEED_PIECES_MAX,
  type CatalogSnapshot,
  type MoveKind,
  type PieceHolding,
  type SeedNode,
} from './types.js';

/** Code-unit order: the same on every machine and locale, unlike `localeCompare`. */
export function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function invalid(message: string, details: Record<string, unknown> = {}): WeightcastError {
  return new WeightcastError('SEED_PLAN_INVALID', message, details);
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

export class Layout {
  readonly model: string;
  /** Node names in code-unit order; a node's number is its position here. */
  readonly nodeNames: readonly string[];
  readonly active: readonly boolean[];
  readonly sizes: readonly number[];
  readonly versions: number[];
  /** Per piece: node numbers, primary first, then replicas ascending. */
  readonly holders: number[][];
  /** Per node: pieces it is primary for, and copies it holds in any role. */
  readonly primaries: number[];
  readonly copies: number[];

  private constructor(
    model: string,
    nodes: readonly SeedNode[],
    sizes: number[],
    versions: number[],
    holders: number[][],
  ) {
    this.model = model;
    this.nodeNames = nodes.map((node) => node.name);
    this.active = nodes.map((node) => node.active);
    this.sizes = sizes;
    this.versions = versions;
    this.holders = holders;
    this.primaries = new Array<number>(nodes.length).fill(0);
    this.copies = new Array<number>(nodes.length).fill(0);
    for (const list of holders) {
      this.primaries[list[0]!]!++;
      for (const node of list) this.copies[node]!++;
    }
  }

  /** Validates a snapshot and builds its canonical working copy. Throws SEED_PLAN_INVALID. */
  static from(snapshot: CatalogSnapshot): Layout {
    const nodes = [...snapshot.nodes].sort((a, b) => compareNames(a.name, b.name));
    if (nodes.length > SEED_NODES_MAX) {
      throw new WeightcastError(
        'LIMIT_EXCEEDED',
        `at most ${SEED_NODES_MAX} seed nodes, got ${nodes.length}`,
      );
    }
    const numbers = new Map<string, number>();
    for (const node of nodes) {
      if (typeof node.name !== 'string' || node.name.length === 0) throw invalid('a node has an empty name');
      if (numbers.has(node.name)) throw invalid(`node ${node.name} is listed twice`, { node: node.name });
      numbers.set(node.name, numbers.size);
    }
    const pieces = [...snapshot.pieces].sort((a, b) => a.index - b.index);
    if (pieces.length > SEED_PIECES_MAX) {
      throw new WeightcastError('LIMIT_EXCEEDED', `at most ${SEED_PIECES_MAX} pieces, got ${pieces.length}`);
    }
    const sizes: number[] = [];
    const versions: number[] = [];
    const holders: number[][] = [];
    pieces.forEach((piece, position) => {
      if (piece.index !== position) {
        throw invalid(`pieces must be numbered 0..${pieces.length - 1} once each; found ${piece.index}`, {
          piece: piece.index,
        });
      }
      if (!isCount(piece.sizeBytes)) throw invalid(`piece ${position} has a bad size`, { piece: position });
      if (!isCount(piece.version)) throw invalid(`piece ${position} has a bad version`, { piece: position });
      holders.push(canonicalHolders(piece, numbers));
      sizes.push(piece.sizeBytes);
      versions.push(piece.version);
    });
    return new Layout(snapshot.model, nodes, sizes, versions, holders);
  }

  get pieceCount(): number {
    return this.holders.length;
  }

  nodeNumber(name: string): number {
    const index = this.nodeNames.indexOf(name);
    assert(index >= 0, `unknown node ${name}`);
    return index;
  }

  holds(piece: number, node: number): boolean {
    return this.holders[piece]!.includes(node);
  }

  primaryOf(piece: number): number {
    return this.holders[piece]![0]!;
  }

  /** Moves the copy on `from` to `to`, in the same role; returns which role that was. */
  moveCopy(piece: number, from: number, to: number): MoveKind {
    const list = this.holders[piece]!;
    const position = list.indexOf(from);
    assert(position >= 0, `piece ${piece} has no copy on node ${from}`);
    assert(!list.includes(to), `piece ${piece} already has a copy on node ${to}`);
    list[position] = to;
    if (position === 0) {
      this.primaries[from]!--;
      this.primaries[to]!++;
    } else {
      sortReplicas(list);
    }
    this.copies[from]!--;
    this.copies[to]!++;
    this.versions[piece]!++;
    return position === 0 ? 'primary' : 'replica';
  }

  /** Makes the replica on `to` the primary; the old primary stays as a replica. */
  promote(piece: number, to: number): void {
    const list = this.holders[piece]!;
    const position = list.indexOf(to);
    assert(position > 0, `piece ${piece} has no replica on node ${to}`);
    const from = list[0]!;
    list[0] = to;
    list[position] = from;
    sortReplicas(list);
    this.primaries[from]!--;
    this.primaries[to]!++;
    this.versions[piece]!++;
  }

  toHoldings(): PieceHolding[] {
    return this.holders.map((list, index) => ({
      index,
      sizeBytes: this.sizes[index]!,
      holders: list.map((node) => this.nodeNames[node]!),
      version: this.versions[index]!,
    }));
  }

  toNodes(): SeedNode[] {
    return this.nodeNames.map((name, node) => ({ name, active: this.active[node]! }));
  }
}

function canonicalHolders(piece: PieceHolding, numbers: ReadonlyMap<string, number>): number[] {
  const names: unknown = piece.holders;
  if (!Array.isArray(names) || names.length === 0) {
    throw invalid(`piece ${piece.index} has no holders`, { piece: piece.index });
  }
  const list = names.map((name: unknown) => {
    const node = typeof name === 'string' ? numbers.get(name) : undefined;
    if (node === undefined) {
      throw invalid(`piece ${piece.index} is held by unknown node ${String(name)}`, { piece: piece.index });
    }
    return node;
  });
  if (new Set(list).size !== list.length) {
    throw invalid(`piece ${piece.index} has two copies on one node`, { piece: piece.index });
  }
  sortReplicas(list);
  return list;
}

/** Keeps the primary first and puts the replicas in ascending node order. */
function sortReplicas(list: number[]): void {
  if (list.length <= 2) return;
  const replicas = list.slice(1).sort((a, b) => a - b);
  for (let i = 0; i < replicas.length; i++) list[i + 1] = replicas[i]!;
}
