/**
 * The layout report: how well a placement lets readers fan out. Readers fetch each piece from its
 * primary, so a whole-file read takes as long as the busiest node needs for its primaries; the read
 * efficiency is the ideal (total bytes over the K measured nodes) divided by that busiest load. A
 * streaming reader keeps W consecutive pieces in flight, so the distinct nodes in every window of W
 * pieces says how many NICs it can use at once.
 */

import { WeightcastError } from '../../errors.js';
import { Layout } from './layout.js';
import { READ_WINDOWS_DEFAULT, type CatalogSnapshot } from './types.js';

export interface NodeLoad {
  readonly name: string;
  readonly active: boolean;
  /** Whether the node is one of the K the report measures against (the plan's target nodes). */
  readonly measured: boolean;
  /** Pieces this node is primary for, and their bytes. */
  readonly pieces: number;
  readonly pieceBytes: number;
  /** Copies in any role, and their bytes. */
  readonly copies: number;
  readonly copyBytes: number;
}

export interface WindowStat {
  /** Pieces per window. */
  readonly window: number;
  readonly distinctNodesMin: number;
  readonly distinctNodesMean: number;
}

export interface LayoutReport {
  readonly pieces: number;
  readonly copies: number;
  readonly totalBytes: number;
  readonly measuredNodes: number;
  /** Every node that is measured or holds a copy, in name order. */
  readonly nodes: readonly NodeLoad[];
  readonly busiestNode: string;
  readonly busiestPieces: number;
  /** The busiest node's share of the model's bytes (by primaries). */
  readonly busiestShare: number;
  /** Ideal per-node bytes over the busiest node's bytes: 1 when every measured node serves equally. */
  readonly readEfficiency: number;
  /** Fewest and most copies on one measured node. */
  readonly copiesMin: number;
  readonly copiesMax: number;
  readonly windows: readonly WindowStat[];
}

/** Reports a snapshot against `nodes` (default: its active nodes). */
export function reportLayout(
  snapshot: CatalogSnapshot,
  options: { nodes?: readonly string[]; windows?: readonly number[] } = {},
): LayoutReport {
  const layout = Layout.from(snapshot);
  const names = options.nodes ?? layout.nodeNames.filter((_, node) => layout.active[node]);
  const measured = names.map((name) => {
    const node = layout.nodeNames.indexOf(name);
    if (node < 0) throw new WeightcastError('SEED_PLAN_INVALID', `unknown node ${name}`, { node: name });
    return node;
  });
  return reportOf(layout, measured, options.windows ?? READ_WINDOWS_DEFAULT);
}

export function reportOf(
  layout: Layout,
  measured: readonly number[],
  windows: readonly number[],
): LayoutReport {
  const nodeCount = layout.nodeNames.length;
  const pieceBytes = new Array<number>(nodeCount).fill(0);
  const copyBytes = new Array<number>(nodeCount).fill(0);
  let totalBytes = 0;
  let copies = 0;
  layout.holders.forEach((list, piece) => {
    const size = layout.sizes[piece]!;
    totalBytes += size;
    copies += list.length;
    pieceBytes[list[0]!]! += size;
    for (const node of list) copyBytes[node]! += size;
  });
  const isMeasured = new Array<boolean>(nodeCount).fill(false);
  for (const node of measured) isMeasured[node] = true;
  const nodes: NodeLoad[] = [];
  let busiest = -1;
  for (let node = 0; node < nodeCount; node++) {
    if (!isMeasured[node] && layout.copies[node] === 0) continue;
    nodes.push({
      name: layout.nodeNames[node]!,
      active: layout.active[node]!,
      measured: isMeasured[node]!,
      pieces: layout.primaries[node]!,
      pieceBytes: pieceBytes[node]!,
      copies: layout.copies[node]!,
      copyBytes: copyBytes[node]!,
    });
    if (busiest < 0 || pieceBytes[node]! > pieceBytes[busiest]!) busiest = node;
  }
  const busiestBytes = busiest < 0 ? 0 : pieceBytes[busiest]!;
  const measuredCopies = measured.map((node) => layout.copies[node]!);
  return {
    pieces: layout.pieceCount,
    copies,
    totalBytes,
    measuredNodes: measured.length,
    nodes,
    busiestNode: busiest < 0 ? '' : layout.nodeNames[busiest]!,
    busiestPieces: busiest < 0 ? 0 : layout.primaries[busiest]!,
    busiestShare: totalBytes === 0 ? 0 : busiestBytes / totalBytes,
    readEfficiency:
      busiestBytes === 0 || measured.length === 0 ? 1 : totalBytes / measured.length / busiestBytes,
    copiesMin: measuredCopies.length === 0 ? 0 : Math.min(...measuredCopies),
    copiesMax: measuredCopies.length === 0 ? 0 : Math.max(...measuredCopies),
    windows: windows.map((window) => windowStat(layout, window)),
  };
}

/** Distinct primaries in every run of `window` consecutive pieces (one run of all when fewer). */
export function windowStat(layout: Layout, window: number): WindowStat {
  const pieceCount = layout.pieceCount;
  if (pieceCount === 0 || window < 1) return { window, distinctNodesMin: 0, distinctNodesMean: 0 };
  const width = Math.min(window, pieceCount);
  const inWindow = new Array<number>(layout.nodeNames.length).fill(0);
  let distinct = 0;
  let min = Number.POSITIVE_INFINITY;
  let sum = 0;
  for (let piece = 0; piece < pieceCount; piece++) {
    if (inWindow[layout.primaryOf(piece)]!++ === 0) distinct++;
    if (piece >= width && --inWindow[layout.primaryOf(piece - width)]! === 0) distinct--;
    if (piece >= width - 1) {
      min = Math.min(min, distinct);
      sum += distinct;
    }
  }
  return { window, distinctNodesMin: min, distinctNodesMean: sum / (pieceCount - width + 1) };
}
