/**
 * Micro-benchmark of the swarm core alone: no network model, every transfer "instant". Assignments
 * go into a FIFO and each is reported verified when it reaches the head, so the core sees the same
 * call pattern as in the simulator (one assignment and one report per piece per host) at the
 * highest rate it can take. Prints, per size: assignments per second, wall time, origin bytes over
 * model bytes, hedges, and peak memory (JS heap plus typed arrays, and RSS).
 *
 * Usage: node dist/bench/swarm-core.js [--hosts N --pieces P] [--seed K]
 * Without --hosts/--pieces it runs 100 x 10,000 and then 1000 x 100,000.
 */

import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { HOSTS_MAX, SwarmCore } from '../src/swarm/core/index.js';
import type { SwarmConfig } from '../src/swarm/core/index.js';
import { flagNumber, readBenchArgs } from './bench-args.js';

const PIECE_BYTES = 4 * 1024 * 1024;
const HOST_BYTES_PER_SECOND = 1.25e9;
/** Virtual milliseconds per report, so the core's periodic sweep runs now and then. */
const MS_PER_REPORT = 0.01;

interface Result {
  hosts: number;
  pieces: number;
  assignments: number;
  seconds: number;
  originRatio: number;
  hedges: number;
  cancelled: number;
  heapPeakBytes: number;
  rssPeakBytes: number;
}

/** A FIFO of transfer ids in a growable ring (ids are up to 2^53, so Float64Array). */
class IdQueue {
  private ring = new Float64Array(1 << 16);
  private head = 0;
  private length = 0;

  get size(): number {
    return this.length;
  }

  push(id: number): void {
    if (this.length === this.ring.length) this.grow();
    this.ring[(this.head + this.length) & (this.ring.length - 1)] = id;
    this.length++;
  }

  shift(): number {
    const id = this.ring[this.head]!;
    this.head = (this.head + 1) & (this.ring.length - 1);
    this.length--;
    return id;
  }

  private grow(): void {
    const ring = new Float64Array(this.ring.length * 2);
    for (let i = 0; i < this.length; i++) ring[i] = this.ring[(this.head + i) & (this.ring.length - 1)]!;
    this.ring = ring;
    this.head = 0;
  }
}

function memoryNow(): { heap: number; rss: number } {
  const usage = process.memoryUsage();
  return { heap: usage.heapUsed + usage.arrayBuffers, rss: usage.rss };
}

function run(hosts: number, pieces: number, seed: number): Result {
  const config: SwarmConfig = {
    pieceCount: pieces,
    pieceBytes: PIECE_BYTES,
    totalBytes: pieces * PIECE_BYTES,
    originUploadBytesPerSecond: HOST_BYTES_PER_SECOND,
    originReadersMax: 8,
    downloadsPerHostMax: 4,
    uploadsPerHostMax: 4,
    hedgeTailPieces: 4,
    randomSeed: seed,
  };
  let heapPeak = 0;
  let rssPeak = 0;
  const sample = (): void => {
    const now = memoryNow();
    heapPeak = Math.max(heapPeak, now.heap);
    rssPeak = Math.max(rssPeak, now.rss);
  };
  const started = performance.now();
  const core = new SwarmCore(config);
  for (let id = 0; id < hosts; id++) {
    core.addHost(0, {
      id,
      zone: `zone-${id % 4}`,
      rack: `rack-${id % 40}`,
      uploadBytesPerSecond: HOST_BYTES_PER_SECOND,
      downloadBytesPerSecond: HOST_BYTES_PER_SECOND,
    });
  }
  const fifo = new IdQueue();
  let nowMs = 0;
  let reports = 0;
  const enqueue = (): void => {
    for (const assignment of core.pollAssignments(nowMs)) fifo.push(assignment.transferId);
    for (const id of core.pollCancellations())
      core.handleTransfer(nowMs, { transferId: id, outcome: 'cancelled' });
  };
  enqueue();
  sample();
  while (core.stats.hostsComplete < hosts) {
    if (fifo.size === 0) {
      const next = core.pollTimeout();
      if (next === undefined)
        throw new Error(`stalled with ${core.stats.hostsComplete}/${hosts} hosts complete`);
      nowMs = Math.max(nowMs, next);
      core.handleTimeout(nowMs);
      enqueue();
      continue;
    }
    const transferId = fifo.shift();
    nowMs += MS_PER_REPORT;
    core.handleTransfer(nowMs, {
      transferId,
      outcome: 'verified',
      bytesPerSecond: HOST_BYTES_PER_SECOND / 4,
    });
    enqueue();
    if (++reports % 1_000_000 === 0) sample();
    if (reports % 10_000_000 === 0) {
      const elapsed = (performance.now() - started) / 1000;
      process.stderr.write(`  ${hosts} x ${pieces}: ${reports / 1e6}M reports, ${elapsed.toFixed(0)} s\n`);
    }
  }
  sample();
  const seconds = (performance.now() - started) / 1000;
  return {
    hosts,
    pieces,
    assignments: core.stats.transfersAssigned,
    seconds,
    originRatio: core.stats.originBytesAssigned / config.totalBytes,
    hedges: core.stats.hedgesAssigned,
    cancelled: core.stats.transfersCancelled,
    heapPeakBytes: heapPeak,
    rssPeakBytes: rssPeak,
  };
}

const USAGE =
  'usage: node dist/bench/swarm-core.js [--hosts N --pieces P] [--seed K (1)]  (default: 100 x 10,000, then 1000 x 100,000)';

function main(): void {
  const args = readBenchArgs('swarm-core', USAGE, (argv) => {
    const { values } = parseArgs({
      args: argv,
      options: { hosts: { type: 'string' }, pieces: { type: 'string' }, seed: { type: 'string' } },
      strict: true,
    });
    return {
      one: values.hosts !== undefined || values.pieces !== undefined,
      hosts: flagNumber(values.hosts, '--hosts', 100, { min: 2, max: HOSTS_MAX, integer: true }),
      pieces: flagNumber(values.pieces, '--pieces', 10_000, { min: 1, max: 10_000_000, integer: true }),
      seed: flagNumber(values.seed, '--seed', 1, { min: 0, max: 2 ** 32 - 1, integer: true }),
    };
  });
  if (args === undefined) return;
  const seed = args.seed;
  const sizes: Array<[number, number]> = args.one
    ? [[args.hosts, args.pieces]]
    : [
        [100, 10_000],
        [1000, 100_000],
      ];
  const MiB = 1024 * 1024;
  console.log(`swarm core, instant transfers in FIFO order, seed ${seed}`);
  console.log(
    'hosts   pieces   assignments  seconds  assign+report/s  ns each  origin/S  hedges  heap+arrays  rss',
  );
  for (const [hosts, pieces] of sizes) {
    const r = run(hosts, pieces, seed);
    const rate = r.assignments / r.seconds;
    console.log(
      [
        String(r.hosts).padStart(5),
        String(r.pieces).padStart(8),
        String(r.assignments).padStart(13),
        r.seconds.toFixed(1).padStart(8),
        Math.round(rate).toLocaleString('en-US').padStart(16),
        (1e9 / rate).toFixed(0).padStart(8),
        r.originRatio.toFixed(4).padStart(9),
        String(r.hedges).padStart(7),
        `${(r.heapPeakBytes / MiB).toFixed(0)} MiB`.padStart(12),
        `${(r.rssPeakBytes / MiB).toFixed(0)} MiB`.padStart(8),
      ].join(' '),
    );
  }
}

main();
