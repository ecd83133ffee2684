/**
 * What `npm run bench:chaos` will do, as pure data: the flags, the rows (one fault each, after the
 * fault-free reference), which hosts each fault hits (from the seed) and when, and how long a row
 * may take. `chaos.ts` carries the plan out; keeping the arithmetic here lets it be tested.
 */

import { parseArgs } from 'node:util';
import { HOSTS_MAX, MBPS_MAX, MBPS_MIN } from '../netns/plan.js';

/** Every row, in the order a run measures them; `none` is the fault-free reference. */
export const ROWS = [
  'none',
  'kill-agents',
  'stop-scheduler',
  'stop-scheduler-kill',
  'restart-scheduler',
  'origin-503',
  'corrupt-peer',
  'disk-full',
] as const;
export type RowKind = (typeof ROWS)[number];

/** The share of the agents killed (rounded up) and the share of the fault-free time they die at. */
export const KILL_SHARE = 0.25;
export const FAULT_AT_SHARE = 0.3;
/** How long the scheduler is kept stopped (SIGSTOP .. SIGCONT) and the origin answers 503. */
export const SCHEDULER_STOP_MS = 20_000;
/**
 * `stop-scheduler-kill`: the agents are killed this long after the scheduler stopped, once the
 * members found it gone (after 5 s of silence, member.ts SCHEDULER_SILENCE_MS_DEFAULT): what is
 * left of a chain mends itself, without a scheduler.
 */
export const KILL_AFTER_STOP_MS = 6_000;
export const ORIGIN_OUTAGE_MS = 10_000;
/** The disk-full host's file system holds this share of the model. */
export const DISK_FULL_SHARE = 0.25;
/** Every row gets at least this long, and at least the fault-free time x the factor plus the fault. */
export const ROW_TIMEOUT_MIN_MS = 120_000;
export const ROW_TIMEOUT_FACTOR = 4;
/** Agent and pull starts per host in a row: the first, plus one restart after a kill. */
export const HOST_STARTS_MAX = 2;

export interface ChaosOptions {
  hosts: number;
  sizeMb: number;
  mbps: number;
  seed: number;
  rows: RowKind[];
  work: string;
  loopback: boolean;
  keep: boolean;
  /** The scheduler's planning flag (`--per-piece`, `--ring-push`, `--ring-chain`), none by default. */
  ring: string[];
}

export class ChaosUsageError extends Error {
  override name = 'ChaosUsageError';
}

export const CHAOS_USAGE = [
  'usage: npm run bench:chaos -- [flags]',
  '  --hosts N (8, at least 4)  --size-mb S (256)  --mbps B (200, hosts and origin)',
  "  --seed K (1: the synthetic model's values and which hosts each fault hits)",
  `  --rows R,R,... (all: ${ROWS.join(',')}; none, the fault-free reference, always runs first)`,
  '  --work DIR (the temp dir)  --loopback (127.0.0.1 even as root)  --keep (keep the logs and copies)',
  '  --per-piece, --ring-push, --ring-chain (how the scheduler plans; default its own: one chain while it is short enough for the model)',
].join('\n');

export function parseChaosOptions(argv: readonly string[], defaultWork: string): ChaosOptions | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      hosts: { type: 'string', default: '8' },
      'size-mb': { type: 'string', default: '256' },
      mbps: { type: 'string', default: '200' },
      seed: { type: 'string', default: '1' },
      rows: { type: 'string', default: ROWS.join(',') },
      work: { type: 'string', default: defaultWork },
      loopback: { type: 'boolean', default: false },
      keep: { type: 'boolean', default: false },
      'ring-push': { type: 'boolean', default: false },
      'ring-chain': { type: 'boolean', default: false },
      'per-piece': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) return 'help';
  return {
    // Four hosts at least: the faults hit distinct hosts (a killed one, the corrupt one, the full one).
    hosts: integer(values.hosts, '--hosts', 4, HOSTS_MAX),
    sizeMb: integer(values['size-mb'], '--size-mb', 8, 64 * 1024),
    mbps: number(values.mbps, '--mbps', MBPS_MIN, MBPS_MAX),
    seed: integer(values.seed, '--seed', 0, 2 ** 31 - 1),
    rows: parseRows(values.rows),
    work: values.work,
    loopback: values.loopback,
    keep: values.keep,
    ring: values['per-piece']
      ? ['--per-piece']
      : values['ring-chain']
        ? ['--ring-chain']
        : values['ring-push']
          ? ['--ring-push']
          : [],
  };
}

/** The rows named, each once, in the run's order, the fault-free reference always first. */
export function parseRows(text: string): RowKind[] {
  const named = text
    .split(',')
    .map((row) => row.trim())
    .filter((row) => row !== '');
  for (const row of named) {
    if (!(ROWS as readonly string[]).includes(row)) throw new ChaosUsageError(`--rows: unknown row ${row}`);
  }
  return ROWS.filter((row) => row === 'none' || named.includes(row));
}

/** Which hosts (indices) the faults hit: distinct hosts, the same for the same seed. */
export interface FaultTargets {
  /** `kill-agents`: KILL_SHARE of the hosts, rounded up, ascending. */
  killed: number[];
  /** `corrupt-peer`: the host whose agent serves wrong bytes. */
  corrupt: number;
  /** `disk-full`: the host whose disk is too small for the model. */
  diskFull: number;
}

export function faultTargets(hosts: number, seed: number): FaultTargets {
  const order = shuffled(hosts, seed);
  const killedCount = Math.ceil(hosts * KILL_SHARE);
  const killed = order.slice(0, killedCount).sort((a, b) => a - b);
  const corrupt = order[killedCount];
  const diskFull = order[killedCount + 1];
  if (corrupt === undefined || diskFull === undefined)
    throw new RangeError(`faultTargets: ${hosts} hosts are too few for distinct targets`);
  return { killed, corrupt, diskFull };
}

/** 0..n-1 in an order fixed by `seed` (Fisher-Yates over a small LCG: reproducible, not secret). */
function shuffled(n: number, seed: number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  let state = (seed >>> 0) ^ 0x9e3779b9;
  const next = (): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [order[i], order[j]] = [order[j] ?? 0, order[i] ?? 0];
  }
  return order;
}

/** When a row's fault fires: FAULT_AT_SHARE of the fault-free run's wall time (`undefined`: none). */
export function faultAtMs(kind: RowKind, referenceMs: number): number | undefined {
  if (kind === 'none' || kind === 'corrupt-peer' || kind === 'disk-full') return undefined;
  return Math.round(referenceMs * FAULT_AT_SHARE);
}

/** How long a fault itself lasts once it fires (a stop, an outage), to be added to a row's timeout. */
export function faultDurationMs(kind: RowKind): number {
  if (kind === 'stop-scheduler' || kind === 'stop-scheduler-kill') return SCHEDULER_STOP_MS;
  if (kind === 'origin-503') return ORIGIN_OUTAGE_MS;
  return 0;
}

/**
 * A row's time limit: at least ROW_TIMEOUT_MIN_MS, and ROW_TIMEOUT_FACTOR x the reference (the
 * fault-free run, or before it ran the fluid bound) plus the fault's own duration.
 */
export function rowTimeoutMs(kind: RowKind, referenceMs: number): number {
  return Math.max(ROW_TIMEOUT_MIN_MS, ROW_TIMEOUT_FACTOR * referenceMs + faultDurationMs(kind));
}

/** The disk-full host's tmpfs size: DISK_FULL_SHARE of the model, in whole MiB, at least 1 MiB. */
export function diskFullBytes(modelBytes: number): number {
  const MiB = 1024 * 1024;
  return Math.max(1, Math.floor((modelBytes * DISK_FULL_SHARE) / MiB)) * MiB;
}

function number(text: string, what: string, min: number, max: number): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value < min || value > max) {
    throw new ChaosUsageError(`${what} must be a number ${min}-${max}, got ${JSON.stringify(text)}`);
  }
  return value;
}

function integer(text: string, what: string, min: number, max: number): number {
  const value = number(text, what, min, max);
  if (!Number.isInteger(value)) throw new ChaosUsageError(`${what} must be an integer, got ${text}`);
  return value;
}
