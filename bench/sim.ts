/**
 * `npm run bench:sim`: the real scheduling core in the deterministic simulator at N = 10, 100 and
 * 1000 hosts (1000 x 100,000 pieces), swarms in 2, 5 and 10 racks behind oversubscribed uplinks
 * (the rack crossing rule, core/racks.ts, at work), one with failing hosts, one whose
 * requests are not pipelined (each waits a full request latency), and ones that lose the scheduler
 * at the start and part-way (the agents' fallback policy, core/fallback.ts, from then on), and ones
 * with adversaries: hosts that make up corrupt reports, hosts that send corrupt bytes (the blame
 * column: adversaries caught, honest hosts banned or demoted at the end, re-checks started). Each
 * row prints T_last against the fluid lower bound of the same setting (of the honest hosts).
 * Every row runs the scheduler's defaults (its 4 origin readers, as the scheduler runs them) unless
 * its name says otherwise. `--max-hosts N` skips larger rows.
 */

import { parseArgs } from 'node:util';
import { simulate, type SimOptions } from '../src/sim/simulate.js';
import { ORIGIN_READERS_DEFAULT } from '../src/swarm/core/types.js';
import { formatSeconds } from '../src/util/units.js';

const MiB = 1024 * 1024;
const GBIT = 1e9 / 8;

interface Case {
  name: string;
  options: SimOptions;
  goal: boolean;
}

function scenario(
  name: string,
  overrides: Partial<SimOptions> & Pick<SimOptions, 'hosts' | 'totalBytes' | 'pieceBytes'>,
  goal = false,
): Case {
  const base = {
    hostBytesPerSecond: 10 * GBIT,
    originBytesPerSecond: 10 * GBIT,
    racks: 0,
    rackUplinkBytesPerSecond: 0,
    latencyMs: 0.5,
    failHosts: 0,
    seed: 1,
    downloadsPerHost: 4,
    uploadsPerHost: 4,
    hedgeTailPieces: 4,
  };
  const merged = { ...base, ...overrides, originReaders: 0 };
  merged.originReaders = overrides.originReaders ?? ORIGIN_READERS_DEFAULT;
  return { name, options: merged, goal };
}

const CASES: Case[] = [
  scenario('N=10', { hosts: 10, totalBytes: 10e9, pieceBytes: 16 * MiB }),
  scenario('N=100', { hosts: 100, totalBytes: 10e9, pieceBytes: 4 * MiB }),
  ...[2, 5, 10].map((racks) =>
    scenario(`N=100, ${racks} racks, 25 Gbit/s uplinks`, {
      hosts: 100,
      totalBytes: 10e9,
      pieceBytes: 4 * MiB,
      racks,
      rackUplinkBytesPerSecond: 25 * GBIT,
    }),
  ),
  scenario('N=100, 5 hosts fail', { hosts: 100, totalBytes: 10e9, pieceBytes: 4 * MiB, failHosts: 5 }),
  scenario('N=100, 1 MiB pieces, not pipelined', {
    hosts: 100,
    totalBytes: 10e9,
    pieceBytes: MiB,
    pipelining: false,
  }),
  scenario('N=10, scheduler lost at 0 s', {
    hosts: 10,
    totalBytes: 10e9,
    pieceBytes: 16 * MiB,
    schedulerLossAtMs: 0,
  }),
  scenario('N=100, scheduler lost at 3 s', {
    hosts: 100,
    totalBytes: 10e9,
    pieceBytes: 4 * MiB,
    schedulerLossAtMs: 3000,
  }),
  scenario('N=10, one chain, scheduler lost at 3 s, 2 hosts fail', {
    hosts: 10,
    totalBytes: 10e9,
    pieceBytes: 16 * MiB,
    schedulerLossAtMs: 3000,
    failHosts: 2,
    ringPush: true,
    ringChain: true,
  }),
  scenario('N=10, per piece, scheduler lost at 3 s, 2 hosts fail', {
    hosts: 10,
    totalBytes: 10e9,
    pieceBytes: 16 * MiB,
    schedulerLossAtMs: 3000,
    failHosts: 2,
  }),
  scenario('N=100, 5 hosts make up corrupt reports', {
    hosts: 100,
    totalBytes: 10e9,
    pieceBytes: 4 * MiB,
    liarHosts: 5,
  }),
  scenario('N=100, 3 hosts send corrupt bytes', {
    hosts: 100,
    totalBytes: 10e9,
    pieceBytes: 4 * MiB,
    corruptHosts: 3,
  }),
  scenario('N=1000, 100k pieces', { hosts: 1000, totalBytes: 100_000 * MiB, pieceBytes: MiB }, true),
];

const USAGE = 'usage: npm run bench:sim [-- --max-hosts N]  (skips the rows with more than N hosts)';

function main(): void {
  let maxHosts = Number.POSITIVE_INFINITY;
  try {
    const { values } = parseArgs({ options: { 'max-hosts': { type: 'string' }, help: { type: 'boolean' } } });
    if (values.help === true) {
      process.stdout.write(`${USAGE}\n`);
      return;
    }
    if (values['max-hosts'] !== undefined) {
      maxHosts = Number(values['max-hosts']);
      if (!Number.isInteger(maxHosts) || maxHosts < 1)
        throw new Error('--max-hosts must be a positive integer');
    }
  } catch (error) {
    process.stderr.write(`bench:sim: ${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  const header = [
    'case',
    'pieces',
    'T_lb',
    'T_last',
    'efficiency',
    'origin / S',
    'p50',
    'p99',
    'wall',
    'blame: caught, honest banned/demoted, re-checks',
    'goal',
    'met',
  ];
  const rows: string[][] = [];
  for (const { name, options, goal } of CASES) {
    if (options.hosts > maxHosts) continue;
    const started = performance.now();
    const result = simulate(options);
    const wall = (performance.now() - started) / 1000;
    const met = result.efficiency >= 0.9 && result.originRatio <= 1.05 && !result.incomplete;
    rows.push([
      name,
      String(Math.ceil(options.totalBytes / options.pieceBytes)),
      formatSeconds(result.tLowerBoundMs / 1000),
      result.incomplete ? 'incomplete' : formatSeconds(result.tLastMs / 1000),
      result.efficiency.toFixed(3),
      result.originRatio.toFixed(3),
      formatSeconds(result.p50Ms / 1000),
      formatSeconds(result.p99Ms / 1000),
      formatSeconds(wall),
      result.adversaries === 0
        ? ''
        : `${result.adversariesCaught}/${result.adversaries}, ${result.honestBanned}/${result.honestDemoted}, ${result.rechecks}`,
      goal ? 'eff >= 0.90, origin <= 1.05' : '',
      goal ? (met ? 'yes' : 'NO') : '',
    ]);
    process.stderr.write(`${name}: done in ${formatSeconds(wall)}\n`);
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (values: string[]): string =>
    '| ' + values.map((v, i) => v.padEnd(widths[i] ?? 0)).join(' | ') + ' |';
  console.log(
    'hosts 10 Gbit/s up and down, origin 10 Gbit/s, 0.5 ms request latency, requests pipelined (unless noted), 4 downloads and 4 uploads per host, seed 1',
  );
  console.log(line(header));
  console.log('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|');
  for (const row of rows) console.log(line(row));
}

main();
