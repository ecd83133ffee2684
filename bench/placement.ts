/**
 * `npm run bench:placement`: how piece placement decides the fan-out of the seed tier.
 *
 * (b) Computed (this file, pure arithmetic on layouts, no network): for 25 and 100 storage nodes and
 * a 140 GiB and a 700 GiB model in 64 MiB pieces (2240 and 11200 pieces), two copies per piece, it
 * compares the layout SeaweedFS's writer tends to leave ("random") with what `weightcast distribute`
 * makes of it: the busiest node's share and the whole-file read efficiency, distinct nodes per read
 * window of 8 and 16 pieces, and the moves each re-layout costs, all from the real planner.
 *
 * The random layout models the seed story (chunks on 5 of 25 servers): the filer asks the master for
 * a writable volume per chunk, and a collection has only a few writable volumes, grown in a small
 * batch on a few servers. So: H = 5 servers chosen at random, V = 7 writable volumes each with its two
 * copies on two distinct of those servers, and every piece in a uniformly random volume (seeded
 * xoshiro128**). Volume growth does not scale with the cluster, so H stays 5 at 100 nodes.
 *
 * (a) The netns testbed (`placement-netns.ts`): real seed nodes on capped links, a single client's
 * pull time with the model on 2 nodes and after `distribute --mode round-robin --apply`, against
 * the bound. It runs when this process is root with `ip netns` and tc (else the reason is printed);
 * `--computed-only` skips it.
 *
 * Flags: --computed-only, --nodes K (6; 2..8 allowed, 6..8 is the setting), --node-mbps B (50),
 * --client-mbps C (2 x K x B), --size-mb S (384), --piece-mb P (1), --concurrency N (4 x K),
 * --work DIR (the temp dir), --keep.
 */

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import {
  planDistribute,
  reportLayout,
  type CatalogSnapshot,
  type DistributePlan,
  type LayoutReport,
  type PieceHolding,
  type SeedNode,
} from '../src/seed/plan/index.js';
import { Random } from '../src/swarm/core/random.js';
import { flagNumber, readBenchArgs } from './bench-args.js';
import { MBPS_MAX, MBPS_MIN } from './netns/plan.js';
import { netnsProblem } from './netns/testbed.js';
import {
  defaultNetnsOptions,
  formatNetnsTable,
  NODES_MAX,
  NODES_MIN,
  runPlacementNetns,
  type NetnsOptions,
} from './placement-netns.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const PIECE_BYTES = 64 * MiB;

export interface PlacementCase {
  readonly nodes: number;
  readonly modelBytes: number;
}

export interface PlacementRow {
  readonly nodes: number;
  readonly modelBytes: number;
  readonly pieces: number;
  readonly layout: string;
  readonly report: LayoutReport;
  /** Moves from the random layout to this one; undefined for the random layout itself. */
  readonly moves?: { primary: number; replica: number; promote: number; bytes: number };
  /** For round-robin: primary moves had residues simply gone to nodes in name order. */
  readonly nameOrderMoves?: number;
}

export const CASES: readonly PlacementCase[] = [
  { nodes: 25, modelBytes: 140 * GiB },
  { nodes: 25, modelBytes: 700 * GiB },
  { nodes: 100, modelBytes: 140 * GiB },
  { nodes: 100, modelBytes: 700 * GiB },
];

export const RANDOM_MODEL = { hotServers: 5, writableVolumes: 7, copies: 2, seed: 1 } as const;

function nodeName(index: number, count: number): string {
  return `seed-${String(index).padStart(String(count - 1).length, '0')}`;
}

/** The SeaweedFS-like layout described at the top of this file. */
export function randomLayout(nodeCount: number, pieceCount: number, seed: number): CatalogSnapshot {
  const random = new Random(seed);
  const nodes: SeedNode[] = Array.from({ length: nodeCount }, (_, index) => ({
    name: nodeName(index, nodeCount),
    active: true,
  }));
  const order = Int32Array.from({ length: nodeCount }, (_, index) => index);
  random.shuffle(order);
  const hot = [...order.subarray(0, RANDOM_MODEL.hotServers)];
  const volumes: string[][] = [];
  for (let volume = 0; volume < RANDOM_MODEL.writableVolumes; volume++) {
    const servers: string[] = [];
    while (servers.length < RANDOM_MODEL.copies) {
      const name = nodeName(hot[random.below(hot.length)]!, nodeCount);
      if (!servers.includes(name)) servers.push(name);
    }
    volumes.push(servers);
  }
  const pieces: PieceHolding[] = [];
  for (let index = 0; index < pieceCount; index++) {
    pieces.push({
      index,
      sizeBytes: PIECE_BYTES,
      holders: volumes[random.below(volumes.length)]!,
      version: 1,
    });
  }
  return { model: `random-${nodeCount}-${pieceCount}`, nodes, pieces };
}

function movesOf(...plans: DistributePlan[]): NonNullable<PlacementRow['moves']> {
  const total = { primary: 0, replica: 0, promote: 0, bytes: 0 };
  for (const plan of plans) {
    total.primary += plan.counts.primary;
    total.replica += plan.counts.replica;
    total.promote += plan.counts.promote;
    total.bytes += plan.counts.bytes;
  }
  return total;
}

/** The computed table (b): four rows per case. */
export function computePlacementTable(cases: readonly PlacementCase[] = CASES): PlacementRow[] {
  const rows: PlacementRow[] = [];
  for (const { nodes, modelBytes } of cases) {
    const pieces = Math.ceil(modelBytes / PIECE_BYTES);
    const base = { nodes, modelBytes, pieces };
    const random = randomLayout(nodes, pieces, RANDOM_MODEL.seed);
    rows.push({ ...base, layout: 'random (SeaweedFS-like)', report: reportLayout(random) });
    const balanced = planDistribute(random, { mode: 'replica' });
    rows.push({
      ...base,
      layout: 'balanced (--mode replica)',
      report: balanced.after,
      moves: movesOf(balanced),
    });
    const roundRobin = planDistribute(random, { mode: 'round-robin' });
    rows.push({
      ...base,
      layout: 'round-robin (--mode round-robin)',
      report: roundRobin.after,
      moves: movesOf(roundRobin),
      nameOrderMoves: roundRobin.rotation!.nameOrderMoves,
    });
    const then = planDistribute({ ...random, pieces: roundRobin.afterPieces }, { mode: 'replica' });
    rows.push({
      ...base,
      layout: 'round-robin, then --mode replica',
      report: then.after,
      moves: movesOf(roundRobin, then),
    });
  }
  return rows;
}

export function formatPlacementTable(rows: readonly PlacementRow[]): string {
  const header = [
    'nodes',
    'model',
    'pieces',
    'layout',
    'busiest node',
    'read eff.',
    'copies/node',
    'distinct/8 min, mean',
    'distinct/16 min, mean',
    'moves: primary + replica (+ promote)',
    'copied',
  ];
  const body = rows.map((row) => {
    const { report } = row;
    const window = (index: number): string => {
      const stat = report.windows[index]!;
      return `${stat.distinctNodesMin}, ${stat.distinctNodesMean.toFixed(2)}`;
    };
    const moves =
      row.moves === undefined
        ? '-'
        : `${row.moves.primary} + ${row.moves.replica} (+ ${row.moves.promote})` +
          (row.nameOrderMoves === undefined ? '' : `; name order: ${row.nameOrderMoves} primary`);
    return [
      String(row.nodes),
      `${row.modelBytes / GiB} GiB`,
      String(row.pieces),
      row.layout,
      `${report.busiestPieces} (${(report.busiestShare * 100).toFixed(1)}%)`,
      report.readEfficiency.toFixed(2),
      `${report.copiesMin}..${report.copiesMax}`,
      window(0),
      window(1),
      moves,
      row.moves === undefined ? '-' : `${(row.moves.bytes / GiB).toFixed(0)} GiB`,
    ];
  });
  const widths = header.map((title, column) =>
    Math.max(title.length, ...body.map((row) => row[column]!.length)),
  );
  const line = (values: readonly string[]): string =>
    '| ' + values.map((value, column) => value.padEnd(widths[column]!)).join(' | ') + ' |';
  return [
    line(header),
    '|' + widths.map((width) => '-'.repeat(width + 2)).join('|') + '|',
    ...body.map(line),
  ].join('\n');
}

const USAGE =
  'usage: npm run bench:placement [-- --computed-only] [--nodes K (6)] [--node-mbps B] [--client-mbps C] ' +
  '[--size-mb S] [--piece-mb P] [--concurrency N] [--work DIR] [--keep]';

interface Options {
  computedOnly: boolean;
  netns: Omit<NetnsOptions, 'log'>;
}

function parseOptions(argv: readonly string[]): Options {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      'computed-only': { type: 'boolean', default: false },
      nodes: { type: 'string', default: '6' },
      'node-mbps': { type: 'string' },
      'client-mbps': { type: 'string' },
      'size-mb': { type: 'string' },
      'piece-mb': { type: 'string' },
      concurrency: { type: 'string' },
      work: { type: 'string' },
      keep: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const nodes = integer(values.nodes, '--nodes', NODES_MIN, NODES_MAX);
  const defaults = defaultNetnsOptions(nodes);
  const nodeMbps =
    values['node-mbps'] === undefined
      ? defaults.nodeMbps
      : integer(values['node-mbps'], '--node-mbps', MBPS_MIN, MBPS_MAX);
  return {
    computedOnly: values['computed-only'],
    netns: {
      ...defaults,
      nodeMbps,
      clientMbps:
        values['client-mbps'] === undefined
          ? 2 * nodes * nodeMbps
          : integer(values['client-mbps'], '--client-mbps', MBPS_MIN, MBPS_MAX),
      sizeMb:
        values['size-mb'] === undefined ? defaults.sizeMb : integer(values['size-mb'], '--size-mb', 1, 4096),
      pieceMb:
        values['piece-mb'] === undefined
          ? defaults.pieceMb
          : integer(values['piece-mb'], '--piece-mb', 1, 64),
      concurrency:
        values.concurrency === undefined
          ? defaults.concurrency
          : integer(values.concurrency, '--concurrency', 1, 256),
      work: values.work ?? defaults.work,
      keep: values.keep,
    },
  };
}

function integer(text: string, what: string, min: number, max: number): number {
  return flagNumber(text, what, min, { min, max, integer: true });
}

const log = (text: string): void => void process.stderr.write(`${text}\n`);

function printComputed(): void {
  console.log(
    '(b) computed placement table: 64 MiB pieces, 2 copies each; "random" = the writer\'s 7 writable volumes ' +
      'on 5 random servers, each piece in a random volume (seed 1); the other rows are what the real planner ' +
      "makes of it. Read efficiency = ideal per-node bytes / busiest node's bytes (reads from primaries; " +
      'a reader free to use either copy of the random layout still reaches only 5 servers: at best 5/N).',
  );
  console.log(formatPlacementTable(computePlacementTable()));
}

/**
 * Part (a); false when it ran and something failed (a pull that did not verify, a failed apply). Missing
 * the ratio goal is reported in the table, not as a failure: this is a benchmark, not a test.
 */
async function runNetnsPart(options: Options): Promise<boolean> {
  if (options.computedOnly) {
    console.log('\n(a) netns testbed: skipped (--computed-only).');
    return true;
  }
  const problem = await netnsProblem();
  if (problem !== undefined) {
    console.log(`\n(a) netns testbed: SKIPPED: needs root with iproute2 (ip netns, tc): ${problem}.`);
    return true;
  }
  const { netns } = options;
  console.log(
    `\n(a) netns testbed: one client pulls a model from K = ${netns.nodes} seed nodes, first with its pieces ` +
      `on 2 nodes (put while only 2 nodes were up), then after distribute --mode round-robin --apply.`,
  );
  try {
    const result = await runPlacementNetns({ ...netns, log });
    console.log(formatNetnsTable(result));
    return result.before.verified && result.after.verified && result.distribute.seconds !== undefined;
  } catch (error) {
    console.log(`(a) FAILED: ${error instanceof Error ? error.message : String(error)}`);
    return false;
  }
}

async function main(): Promise<number | undefined> {
  const options = readBenchArgs('bench:placement', USAGE, parseOptions);
  if (options === undefined) return undefined;
  printComputed();
  return (await runNetnsPart(options)) ? 0 : 1;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const code = await main();
  if (code !== undefined) process.exitCode = code;
}
