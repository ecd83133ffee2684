/**
 * The dry run as people and scripts read it. Text: the layout before and after side by side (summary
 * lines, then a per-node table), the rotation a round-robin plan chose, and the moves; large plans are
 * cut to their first moves and the busiest nodes, with a line saying what was left out. JSON: the same
 * plan as one canonical document (fixed key order, every move), so equal plans print equal bytes.
 */

import { formatBytes } from '../../util/units.js';
import type { DistributePlan } from './distribute.js';
import type { LayoutReport, NodeLoad } from './report.js';
import { textTable } from '../../util/text-table.js';

export interface RenderOptions {
  /** Moves listed in full before the rest are summarised (default 40). */
  readonly movesShown?: number;
  /** Nodes listed in the table before the rest are summarised (default 32). */
  readonly nodesShown?: number;
}

export function renderPlanText(plan: DistributePlan, options: RenderOptions = {}): string {
  const lines: string[] = [];
  const { before, after } = plan;
  const targets = plan.targetNodes;
  lines.push(
    `model ${plan.model}: ${before.pieces} pieces, ${before.copies} copies, ${formatBytes(before.totalBytes)}`,
    `mode ${plan.mode} over ${targets.length} nodes` + (targets.length <= 8 ? `: ${targets.join(', ')}` : ''),
  );
  if (plan.drainedNodes.length > 0) lines.push(`drained: ${plan.drainedNodes.join(', ')}`);
  lines.push('', ...textTable(['', 'before', 'after'], summaryRows(before, after), []));
  lines.push('', ...nodeTable(plan, options.nodesShown ?? 32));
  if (plan.rotation !== undefined) {
    const shown = plan.rotation.nodes.slice(0, 8).map((node, residue) => `${residue}->${node}`);
    const more = plan.rotation.nodes.length - shown.length;
    lines.push(
      '',
      `rotation (piece i -> node of residue i mod ${plan.rotation.nodes.length}): ${shown.join(' ')}` +
        (more > 0 ? ` ... ${more} more` : ''),
      `  ${plan.rotation.moves} pieces move (and ${plan.rotation.promotes} promotions) under this rotation; ` +
        `name order would move ${plan.rotation.nameOrderMoves}`,
    );
  }
  lines.push('', ...movesSection(plan, options.movesShown ?? 40));
  return lines.join('\n') + '\n';
}

function summaryRows(before: LayoutReport, after: LayoutReport): string[][] {
  const busiest = (report: LayoutReport): string =>
    `${report.busiestNode || '-'} ${report.busiestPieces} pieces (${percent(report.busiestShare)})`;
  const rows = [
    ['busiest node', busiest(before), busiest(after)],
    ['read efficiency', before.readEfficiency.toFixed(2), after.readEfficiency.toFixed(2)],
    ['copies per node', `${before.copiesMin}..${before.copiesMax}`, `${after.copiesMin}..${after.copiesMax}`],
  ];
  before.windows.forEach((window, index) => {
    const later = after.windows[index]!;
    rows.push([
      `distinct nodes / ${window.window} pieces`,
      `min ${window.distinctNodesMin}, mean ${window.distinctNodesMean.toFixed(2)}`,
      `min ${later.distinctNodesMin}, mean ${later.distinctNodesMean.toFixed(2)}`,
    ]);
  });
  return rows;
}

function nodeTable(plan: DistributePlan, nodesShown: number): string[] {
  const moved = new Map<string, { out: number; in: number }>();
  const tally = (name: string): { out: number; in: number } => {
    let entry = moved.get(name);
    if (entry === undefined) moved.set(name, (entry = { out: 0, in: 0 }));
    return entry;
  };
  for (const move of plan.moves) {
    if (move.kind === 'promote') continue;
    tally(move.from).out++;
    tally(move.to).in++;
  }
  const afterByName = new Map(plan.after.nodes.map((node) => [node.name, node]));
  const names = [...new Set([...plan.before.nodes, ...plan.after.nodes].map((node) => node.name))];
  const beforeByName = new Map(plan.before.nodes.map((node) => [node.name, node]));
  // Busiest first (most pieces before), so a cut table still shows where the load was.
  const ordered = names.sort(
    (a, b) =>
      (beforeByName.get(b)?.pieces ?? 0) - (beforeByName.get(a)?.pieces ?? 0) || (a < b ? -1 : a > b ? 1 : 0),
  );
  const rows = ordered.slice(0, nodesShown).map((name) => {
    const was = beforeByName.get(name);
    const now = afterByName.get(name);
    return [
      name + (was !== undefined && !was.active ? ' (inactive)' : ''),
      String(was?.pieces ?? 0),
      String(was?.copies ?? 0),
      String(now?.pieces ?? 0),
      String(now?.copies ?? 0),
      String(moved.get(name)?.out ?? 0),
      String(moved.get(name)?.in ?? 0),
    ];
  });
  const lines = textTable(
    ['node', 'pieces', 'copies', 'pieces after', 'copies after', 'copies out', 'copies in'],
    rows,
    [1, 2, 3, 4, 5, 6],
  );
  const rest = ordered.length - rows.length;
  if (rest > 0) {
    const after = ordered.slice(nodesShown).map((name) => afterByName.get(name));
    lines.push(
      `... ${rest} more nodes; after: pieces ${range(after, 'pieces')}, copies ${range(after, 'copies')}`,
    );
  }
  return lines;
}

function range(nodes: readonly (NodeLoad | undefined)[], field: 'pieces' | 'copies'): string {
  const values = nodes.map((node) => node?.[field] ?? 0);
  return `${Math.min(...values)}..${Math.max(...values)}`;
}

function movesSection(plan: DistributePlan, movesShown: number): string[] {
  const { counts } = plan;
  const lines = [
    plan.moves.length === 0
      ? 'plan: no moves (the layout already fits this mode)'
      : `plan: ${plan.moves.length} moves (${counts.primary} primary, ${counts.replica} replica, ` +
        `${counts.promote} promote), ${formatBytes(counts.bytes)} to copy`,
  ];
  if (plan.moves.length === 0) return lines;
  const rows = plan.moves
    .slice(0, movesShown)
    .map((move, index) => [
      String(index + 1),
      String(move.piece),
      move.kind,
      move.from,
      '->',
      move.to,
      `v${move.expectVersion}`,
    ]);
  lines.push(...textTable(['#', 'piece', 'kind', 'from', '', 'to', 'expect'], rows, [0, 1]));
  const rest = plan.moves.length - rows.length;
  if (rest > 0) lines.push(`... ${rest} more moves (the JSON form lists every move)`);
  return lines;
}

function percent(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}

/** The plan as one JSON document; `includeLayout` adds every entry after the moves. */
export function planToJson(plan: DistributePlan, options: { includeLayout?: boolean } = {}): unknown {
  const document: Record<string, unknown> = {
    model: plan.model,
    mode: plan.mode,
    targetNodes: plan.targetNodes,
    drainedNodes: plan.drainedNodes,
  };
  if (plan.rotation !== undefined) document.rotation = plan.rotation;
  document.counts = plan.counts;
  document.before = plan.before;
  document.after = plan.after;
  document.moves = plan.moves;
  if (options.includeLayout === true) document.afterPieces = plan.afterPieces;
  return document;
}

export function renderPlanJson(plan: DistributePlan, options: { includeLayout?: boolean } = {}): string {
  return JSON.stringify(planToJson(plan, options)) + '\n';
}
