/**
 * `node dist/bench/trace-report.js LOGDIR [MODEL]`: where a swarm run's time went, from the agents' piece
 * traces. Run the fan-out with `WEIGHTCAST_TRACE_PIECES=1 node dist/bench/fanout.js --legs swarm-warm
 * --skip-copy-out --keep` (warm agents) or `--legs swarm --keep` (the user's flow) and point this at
 * the logs directory it names. Each agent log holds its
 * "listening on URL" line and one JSON line per piece (wall-clock `at` after verification, `ms`
 * from request to last byte, `waitMs` from request to first byte, `verifyMs`, `parent`).
 *
 * Prints the origin's span and rate (also in 250 ms windows) and how long after its last byte the
 * hosts finished; how long each pair of hosts sat idle between consecutive transfers (pipelined or
 * not); how recent the parent's copy of what peers asked for was; per host, its download rate, the median rate of one transfer from a peer and its transfers
 * in flight over time; per parent, its uploads in flight; the download rate a host reached with k
 * transfers in flight; a timeline of pieces held against pieces anywhere in the swarm; and, from a
 * run of the user-flow leg (`--legs swarm`, which writes the clock's start), each host's start-up:
 * its agent listening, its pull's join, its registration, its first request. A run of pieces (a transfer unit) counts as one transfer everywhere but in the timeline.
 * Diagnostics only: it reads files and prints.
 */

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { textTable } from '../src/util/text-table.js';

export interface Fetch {
  host: string;
  /** The first piece; a run of several (a transfer unit) is one fetch of `pieces` pieces. */
  piece: number;
  pieces?: number;
  bytes: number;
  /** 'origin' or the parent host's label. */
  parent: string;
  startMs: number;
  /** When the first byte landed (from the trace's `waitMs`; absent in older traces). */
  firstByteMs?: number;
  endMs: number;
  storedMs: number;
}

/** What bench:fanout writes into the logs directory, with the traces: the clock's start (epoch ms). */
export const CLOCK_FILE = 'clock.json';

const SAMPLE_MS = 10;
const CONCURRENCY_COLUMNS = 9;
/** Parents counted in a host's "top" share (the default downloads per host). */
const TOP_PARENTS = 4;
/** A transfer starts a cold pair when its pair moved nothing in this many ms before it. */
const COLD_GAP_MS = 200;

/**
 * Reads every `agent-*.log` in `dir` into fetches with times relative to the first request. Agents
 * may have fetched several models (bench:fanout warms them up on a small one first): only the model
 * with the most transfers is read, or `model` (a digest prefix) when given.
 */
export function readTrace(dir: string, model?: string): Fetch[] {
  const logs = readdirSync(dir).filter((name) => /^agent-.+\.log$/.test(name));
  const labelOf = new Map<string, string>();
  const raw: Array<{ host: string; event: Record<string, unknown> }> = [];
  for (const name of logs) {
    const host = name.slice('agent-'.length, -'.log'.length);
    for (const line of readFileSync(join(dir, name), 'utf8').split('\n')) {
      const listening = /listening on (http:\/\/\S+)/.exec(line);
      if (listening?.[1] !== undefined) labelOf.set(listening[1].replace(/\/+$/, ''), host);
      if (!line.startsWith('{')) continue;
      try {
        const event = JSON.parse(line) as Record<string, unknown>;
        if (event['type'] === 'piece' && event['outcome'] === 'verified') raw.push({ host, event });
      } catch {
        // A line cut short by a killed process: skip it.
      }
    }
  }
  const perModel = new Map<string, number>();
  for (const { event } of raw)
    perModel.set(String(event['model']), (perModel.get(String(event['model'])) ?? 0) + 1);
  const chosen =
    model === undefined
      ? [...perModel.entries()].sort((a, b) => b[1] - a[1])[0]?.[0]
      : [...perModel.keys()].find((name) => name.startsWith(model));
  // A run of pieces (a transfer unit) is one transfer: its first piece's event stands for it.
  const runOf = (
    event: Record<string, unknown>,
  ): { first: number; pieces: number; bytes: number } | undefined => {
    const run = event['run'] as { first?: unknown; pieces?: unknown; bytes?: unknown } | undefined;
    return typeof run?.first === 'number' && typeof run.pieces === 'number' && typeof run.bytes === 'number'
      ? { first: run.first, pieces: run.pieces, bytes: run.bytes }
      : undefined;
  };
  const fetches = raw
    .filter(({ event }) => String(event['model']) === chosen)
    .filter(({ event }) => runOf(event) === undefined || runOf(event)?.first === Number(event['piece']))
    .map(({ host, event }) => {
      const run = runOf(event);
      const at = Number(event['at']);
      const verifyMs = Number(event['verifyMs'] ?? 0);
      const endMs = at - verifyMs;
      const parentUrl = typeof event['parent'] === 'string' ? event['parent'].replace(/\/+$/, '') : undefined;
      const startMs = endMs - Number(event['ms']);
      const waitMs = event['waitMs'];
      return {
        host,
        piece: Number(event['piece']),
        ...(run === undefined ? {} : { pieces: run.pieces }),
        bytes: run?.bytes ?? Number(event['bytes']),
        parent: parentUrl === undefined ? 'origin' : (labelOf.get(parentUrl) ?? parentUrl),
        startMs,
        ...(typeof waitMs === 'number' ? { firstByteMs: startMs + waitMs } : {}),
        endMs,
        storedMs: at,
      };
    });
  if (fetches.length === 0) return fetches;
  const t0 = Math.min(...fetches.map((f) => f.startMs));
  for (const f of fetches) {
    f.startMs -= t0;
    if (f.firstByteMs !== undefined) f.firstByteMs -= t0;
    f.endMs -= t0;
    f.storedMs -= t0;
  }
  return fetches;
}

/**
 * Consecutive transfers between the same two hosts (peers only): `pipelined` when the next was
 * requested before the previous one's last byte, with the idle time on the pair from that last byte
 * to the next one's first byte; `after`: requested only after it, with the same idle time. Needs
 * first-byte times (traces with `waitMs`); undefined without them.
 */
export interface PairGaps {
  pipelined: number[];
  after: number[];
}

export function pairGaps(fetches: readonly Fetch[]): PairGaps | undefined {
  const peers = fetches.filter((f) => f.parent !== 'origin');
  if (peers.length === 0 || peers.some((f) => f.firstByteMs === undefined)) return undefined;
  const byPair = new Map<string, Fetch[]>();
  for (const f of peers) {
    const key = `${f.host}<${f.parent}`;
    const list = byPair.get(key) ?? [];
    list.push(f);
    byPair.set(key, list);
  }
  const gaps: PairGaps = { pipelined: [], after: [] };
  for (const list of byPair.values()) {
    list.sort((a, b) => a.startMs - b.startMs);
    for (let i = 1; i < list.length; i++) {
      const previous = list[i - 1]!;
      const next = list[i]!;
      const idle = (next.firstByteMs as number) - previous.endMs;
      (next.startMs < previous.endMs ? gaps.pipelined : gaps.after).push(idle);
    }
  }
  return gaps;
}

function gapLines(gaps: PairGaps | undefined): string[] {
  if (gaps === undefined) return [];
  const describe = (values: number[]): string =>
    values.length === 0
      ? 'none'
      : `${values.length}, idle p50 ${quantile(values, 0.5).toFixed(0)} ms, p90 ${quantile(values, 0.9).toFixed(0)} ms`;
  return [
    '',
    "Consecutive transfers on a pair (idle: the previous one's last byte to the next one's first):",
    `requested before the previous ended (pipelined): ${describe(gaps.pipelined)}`,
    `requested after it ended: ${describe(gaps.after)}`,
  ];
}

/** Share of sampled instants (every SAMPLE_MS within [fromMs, toMs)) with k of `spans` open, k = 0.. */
export function concurrencyShares(
  spans: ReadonlyArray<{ startMs: number; endMs: number }>,
  fromMs: number,
  toMs: number,
): number[] {
  const counts: number[] = [];
  let samples = 0;
  for (let t = fromMs; t < toMs; t += SAMPLE_MS) {
    let open = 0;
    for (const span of spans) if (span.startMs <= t && span.endMs > t) open++;
    counts[open] = (counts[open] ?? 0) + 1;
    samples++;
  }
  return Array.from(counts, (count) => (samples === 0 ? 0 : (count ?? 0) / samples));
}

/**
 * Of `own` (one host's transfers), the peer-served ones: the share from its TOP_PARENTS most used
 * parents, and the share that started a cold pair (nothing between the two hosts in flight or ended
 * within COLD_GAP_MS; TCP then restarts from a small window and the pairings keep changing).
 */
export function pairingShares(own: readonly Fetch[]): { top: number; cold: number } {
  const peers = own.filter((f) => f.parent !== 'origin').sort((a, b) => a.startMs - b.startMs);
  if (peers.length === 0) return { top: Number.NaN, cold: Number.NaN };
  const perParent = new Map<string, number>();
  for (const f of peers) perParent.set(f.parent, (perParent.get(f.parent) ?? 0) + 1);
  const top = [...perParent.values()]
    .sort((a, b) => b - a)
    .slice(0, TOP_PARENTS)
    .reduce((a, b) => a + b, 0);
  const busyUntil = new Map<string, number>();
  let cold = 0;
  for (const f of peers) {
    const until = busyUntil.get(f.parent);
    if (until === undefined || until + COLD_GAP_MS < f.startMs) cold++;
    busyUntil.set(f.parent, Math.max(until ?? -Infinity, f.endMs));
  }
  return { top: top / peers.length, cold: cold / peers.length };
}

function percent(share: number): string {
  return Number.isNaN(share) ? '-' : String(Math.round(share * 100));
}

/** A host's mean download rate: the bytes it received over the time to its last stored piece. */
function hostRate(own: readonly Fetch[]): number {
  const doneMs = Math.max(...own.map((f) => f.storedMs));
  return own.reduce((sum, f) => sum + f.bytes, 0) / (Math.max(1, doneMs) / 1000);
}

/** The median rate of one transfer from a peer, first byte to last, in MB/s ('-' without first bytes). */
function peerRateP50(own: readonly Fetch[]): string {
  const rates = own
    .filter((f) => f.parent !== 'origin' && f.firstByteMs !== undefined && f.endMs > f.firstByteMs)
    .map((f) => f.bytes / 1e6 / ((f.endMs - (f.firstByteMs as number)) / 1000));
  return rates.length === 0 ? '-' : quantile(rates, 0.5).toFixed(1);
}

function quantile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]!;
}

function shareColumns(shares: number[]): string[] {
  const columns: string[] = [];
  for (let k = 0; k < CONCURRENCY_COLUMNS; k++) {
    const share =
      k === CONCURRENCY_COLUMNS - 1 ? shares.slice(k).reduce((a, b) => a + b, 0) : (shares[k] ?? 0);
    columns.push(share === 0 ? '' : `${Math.round(share * 100)}`);
  }
  return columns;
}

function rightFrom(first: number, end: number): number[] {
  return Array.from({ length: end - first }, (_, i) => first + i);
}

const CONCURRENCY_HEADERS = Array.from({ length: CONCURRENCY_COLUMNS }, (_, k) =>
  k === CONCURRENCY_COLUMNS - 1 ? `${k}+` : String(k),
);

/**
 * The origin's part of a run and how far the hosts trail it: the origin's first request and last
 * byte, its bytes and mean rate over that span, and each host's mean download rate and how long
 * after the origin's last byte its own last piece was stored. The hosts' downlinks are the
 * bottleneck when every link has the same cap, so the lag is the pieces the hosts fell behind the
 * origin (at the start, and by running below its rate), which they can no longer make up.
 */
export interface OriginSummary {
  transfers: number;
  bytes: number;
  firstMs: number;
  lastMs: number;
  /** Bytes per second over [firstMs, lastMs]. */
  rate: number;
  hosts: Array<{ host: string; doneMs: number; lagMs: number; rate: number }>;
}

export function originSummary(fetches: readonly Fetch[]): OriginSummary | undefined {
  const fromOrigin = fetches.filter((f) => f.parent === 'origin');
  if (fromOrigin.length === 0) return undefined;
  const firstMs = Math.min(...fromOrigin.map((f) => f.startMs));
  const lastMs = Math.max(...fromOrigin.map((f) => f.endMs));
  const bytes = fromOrigin.reduce((sum, f) => sum + f.bytes, 0);
  const hosts = [...new Set(fetches.map((f) => f.host))].sort().map((host) => {
    const own = fetches.filter((f) => f.host === host);
    const doneMs = Math.max(...own.map((f) => f.storedMs));
    return { host, doneMs, lagMs: doneMs - lastMs, rate: hostRate(own) };
  });
  return {
    transfers: fromOrigin.length,
    bytes,
    firstMs,
    lastMs,
    rate: bytes / (Math.max(1, lastMs - firstMs) / 1000),
    hosts,
  };
}

/** The origin's rate in windows of this length, for the share of its span it ran below its mean. */
const ORIGIN_WINDOW_MS = 250;
/** A window below this share of the origin's mean rate counts as a dip. */
const ORIGIN_DIP_SHARE = 0.85;

/**
 * Bytes per second landed in each `windowMs` window from `fromMs` to `toMs`, each transfer's bytes
 * spread evenly from its first byte (its start when the trace has none) to its last.
 */
export function windowRates(
  fetches: readonly Fetch[],
  fromMs: number,
  toMs: number,
  windowMs: number,
): number[] {
  const count = Math.max(1, Math.ceil((toMs - fromMs) / windowMs));
  const bytes = new Float64Array(count);
  for (const f of fetches) {
    const begin = (f.firstByteMs ?? f.startMs) - fromMs;
    const end = f.endMs - fromMs;
    const perMs = f.bytes / Math.max(1e-3, end - begin);
    const first = Math.max(0, Math.floor(begin / windowMs));
    const last = Math.min(count - 1, Math.floor(end / windowMs));
    for (let i = first; i <= last; i++) {
      const overlap = Math.min(end, (i + 1) * windowMs) - Math.max(begin, i * windowMs);
      if (overlap > 0) bytes[i]! += perMs * overlap;
    }
  }
  return [...bytes].map((b) => b / (windowMs / 1000));
}

function originLines(summary: OriginSummary | undefined, fetches: readonly Fetch[]): string[] {
  if (summary === undefined) return ['', 'Origin: no piece came from the origin.'];
  const lags = summary.hosts.map((h) => h.lagMs);
  const rates = summary.hosts.map((h) => h.rate / 1e6);
  const fromOrigin = fetches.filter((f) => f.parent === 'origin');
  // Whole windows only: the last, partial one would read as a dip.
  const whole = Math.floor((summary.lastMs - summary.firstMs) / ORIGIN_WINDOW_MS);
  const windows = windowRates(fromOrigin, summary.firstMs, summary.lastMs, ORIGIN_WINDOW_MS).slice(0, whole);
  const dips = windows.filter((rate) => rate < ORIGIN_DIP_SHARE * summary.rate).length;
  const windowLine =
    windows.length === 0
      ? []
      : [
          `Origin in ${ORIGIN_WINDOW_MS} ms windows: p10 ${(quantile(windows, 0.1) / 1e6).toFixed(2)}, ` +
            `p50 ${(quantile(windows, 0.5) / 1e6).toFixed(2)} MB/s; ${dips} of ${windows.length} under ` +
            `${ORIGIN_DIP_SHARE} x its mean.`,
        ];
  return [
    '',
    `Origin: ${summary.transfers} transfers, ${(summary.bytes / 1e6).toFixed(1)} MB from its first request ` +
      `(${summary.firstMs.toFixed(0)} ms) to its last byte (${(summary.lastMs / 1000).toFixed(2)} s): ` +
      `${(summary.rate / 1e6).toFixed(2)} MB/s.`,
    `Hosts: last piece ${(Math.min(...lags) / 1000).toFixed(2)}-${(Math.max(...lags) / 1000).toFixed(2)} s after ` +
      `the origin's last byte; mean download ${Math.min(...rates).toFixed(2)}-${Math.max(...rates).toFixed(2)} MB/s ` +
      '(bytes over the time to their last piece).',
    ...windowLine,
  ];
}

/**
 * For each transfer from a peer: how many transfers the parent had stored after the one that brought
 * it the piece, by the time the peer asked (0: the parent's newest). An agent keeps its newest runs
 * in memory for uploads (RecentPieces); this says how many it needs for most uploads to come from
 * there. Transfers whose parent's copy is not in the trace (it held the piece before) are left out.
 */
export function parentRecency(fetches: readonly Fetch[]): number[] {
  const byHost = new Map<string, Fetch[]>();
  for (const f of fetches) byHost.set(f.host, [...(byHost.get(f.host) ?? []), f]);
  for (const list of byHost.values()) list.sort((a, b) => a.storedMs - b.storedMs);
  const recency: number[] = [];
  for (const f of fetches) {
    if (f.parent === 'origin') continue;
    const stored = byHost.get(f.parent) ?? [];
    const index = stored.findIndex(
      (own) => own.piece <= f.piece && f.piece < own.piece + (own.pieces ?? 1) && own.storedMs <= f.startMs,
    );
    if (index < 0) continue;
    let newer = 0;
    for (let i = index + 1; i < stored.length && (stored[i] as Fetch).storedMs <= f.startMs; i++) newer++;
    recency.push(newer);
  }
  return recency;
}

function recencyLines(recency: readonly number[]): string[] {
  if (recency.length === 0) return [];
  const within = (k: number): string => `${percent(recency.filter((n) => n < k).length / recency.length)} %`;
  return [
    '',
    `Transfers from peers that asked for one of the parent's k newest transfers (of ${recency.length}): ` +
      `k = 4: ${within(4)}, 8: ${within(8)}, 16: ${within(16)}, 32: ${within(32)}.`,
  ];
}

/** One host's start, in ms after the clock (absent: not in its trace). */
export interface HostStart {
  host: string;
  listening?: number;
  joined?: number;
  registered?: number;
  /** Its first piece request, to anyone. */
  firstRequest?: number;
  /** Its first request to the origin. */
  firstOriginRequest?: number;
}

/**
 * Each host's start-up from its agent's trace: when it listened, was joined by its pull, registered
 * with the scheduler and sent its first piece request, in ms after the clock's start (CLOCK_FILE,
 * which bench:fanout writes when tracing). Undefined without that file.
 */
export function readStartup(dir: string, model?: string): HostStart[] | undefined {
  const clockPath = join(dir, CLOCK_FILE);
  if (!existsSync(clockPath)) return undefined;
  const startedAt = Number(
    (JSON.parse(readFileSync(clockPath, 'utf8')) as { startedAt?: unknown }).startedAt,
  );
  if (!Number.isFinite(startedAt)) return undefined;
  const starts: HostStart[] = [];
  for (const name of readdirSync(dir)
    .filter((file) => /^agent-.+\.log$/.test(file))
    .sort()) {
    const start: HostStart = { host: name.slice('agent-'.length, -'.log'.length) };
    const earliest = (key: 'firstRequest' | 'firstOriginRequest', ms: number): void => {
      start[key] = Math.min(start[key] ?? Infinity, ms);
    };
    for (const line of readFileSync(join(dir, name), 'utf8').split('\n')) {
      if (!line.startsWith('{')) continue;
      let event: Record<string, unknown>;
      try {
        event = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      const at = Number(event['at']) - startedAt;
      if (!Number.isFinite(at)) continue;
      if (model !== undefined && typeof event['model'] === 'string' && !event['model'].startsWith(model))
        continue;
      const type = event['type'];
      if (type === 'listening') start.listening ??= at;
      else if (type === 'joined') start.joined ??= at;
      else if (type === 'registered') start.registered ??= at;
      else if (type === 'piece' && event['outcome'] === 'verified') {
        const requested = at - Number(event['verifyMs'] ?? 0) - Number(event['ms']);
        if (!Number.isFinite(requested)) continue;
        earliest('firstRequest', requested);
        if (typeof event['parent'] !== 'string') earliest('firstOriginRequest', requested);
      }
    }
    starts.push(start);
  }
  return starts;
}

/** The start-up table: each host's steps after the clock, and the origin's first request. */
export function startupLines(starts: readonly HostStart[]): string[] {
  const seconds = (ms: number | undefined): string => (ms === undefined ? '-' : (ms / 1000).toFixed(2));
  const origin = Math.min(...starts.map((start) => start.firstOriginRequest ?? Infinity));
  return [
    '',
    "Start-up, s after the clock (each host's agent listening, its pull's join, its registration with the",
    `scheduler, its first piece request); the origin's first request came at ${seconds(Number.isFinite(origin) ? origin : undefined)} s:`,
    ...textTable(
      ['host', 'listening', 'joined', 'registered', 'first request'],
      starts.map((start) => [
        start.host,
        seconds(start.listening),
        seconds(start.joined),
        seconds(start.registered),
        seconds(start.firstRequest),
      ]),
      [1, 2, 3, 4],
    ),
  ];
}

export function report(fetches: readonly Fetch[]): string {
  const lines: string[] = [];
  const hosts = [...new Set(fetches.map((f) => f.host))].sort();
  const endMs = Math.max(...fetches.map((f) => f.storedMs));
  lines.push(
    `${fetches.length} verified transfers to ${hosts.length} hosts; last stored at ${(endMs / 1000).toFixed(2)} s`,
  );
  lines.push(...originLines(originSummary(fetches), fetches));
  lines.push(...gapLines(pairGaps(fetches)));
  lines.push(...recencyLines(parentRecency(fetches)));
  lines.push(
    '',
    `Per host: pieces, from the origin, peer pieces from its ${TOP_PARENTS} most used parents (top %) and`,
    `starting a cold pair (cold %: nothing with that parent for ${COLD_GAP_MS} ms before), transfer times,`,
    'its download rate (bytes over the time to its last piece) and the median rate of one transfer from a',
    "peer (first byte to last), and downloads in flight (% of the host's time from 0 to its last piece):",
  );
  const hostRows = hosts.map((host) => {
    const own = fetches.filter((f) => f.host === host);
    const last = Math.max(...own.map((f) => f.storedMs));
    const pairing = pairingShares(own);
    return [
      host,
      String(own.length),
      String(own.filter((f) => f.parent === 'origin').length),
      percent(pairing.top),
      percent(pairing.cold),
      (last / 1000).toFixed(2),
      (hostRate(own) / 1e6).toFixed(2),
      peerRateP50(own),
      quantile(
        own.map((f) => f.endMs - f.startMs),
        0.5,
      ).toFixed(0),
      quantile(
        own.map((f) => f.endMs - f.startMs),
        0.9,
      ).toFixed(0),
      quantile(
        own.map((f) => f.storedMs - f.endMs),
        0.5,
      ).toFixed(0),
      ...shareColumns(concurrencyShares(own, 0, last)),
    ];
  });
  lines.push(
    ...textTable(
      [
        'host',
        'pieces',
        'origin',
        `top${TOP_PARENTS} %`,
        'cold %',
        'done s',
        'MB/s',
        'peer MB/s',
        'ms p50',
        'ms p90',
        'verify p50',
        ...CONCURRENCY_HEADERS,
      ],
      hostRows,
      rightFrom(1, 11 + CONCURRENCY_COLUMNS),
    ),
  );

  lines.push('', 'Uploads in flight per parent (% of the time from 0 to the last piece):');
  const parents = [...new Set(fetches.map((f) => f.parent))].sort();
  const parentRows = parents.map((parent) => {
    const own = fetches.filter((f) => f.parent === parent);
    return [parent, String(own.length), ...shareColumns(concurrencyShares(own, 0, endMs))];
  });
  lines.push(
    ...textTable(
      ['parent', 'uploads', ...CONCURRENCY_HEADERS],
      parentRows,
      rightFrom(1, 2 + CONCURRENCY_COLUMNS),
    ),
  );

  // Bytes each host received per 100 ms window (each transfer's bytes spread over its span),
  // grouped by how many of its transfers were in flight mid-window.
  const byConcurrency = new Map<number, number[]>();
  for (const host of hosts) {
    const own = fetches.filter((f) => f.host === host);
    const last = Math.max(...own.map((f) => f.endMs));
    for (let t = 1000; t + 100 < last - 1000; t += 100) {
      let bytes = 0;
      let open = 0;
      for (const f of own) {
        const overlap = Math.min(t + 100, f.endMs) - Math.max(t, f.startMs);
        if (overlap > 0) bytes += (f.bytes * overlap) / Math.max(1e-3, f.endMs - f.startMs);
        if (f.startMs <= t + 50 && f.endMs > t + 50) open++;
      }
      const list = byConcurrency.get(open) ?? [];
      list.push(bytes / 0.1 / 1e6);
      byConcurrency.set(open, list);
    }
  }
  lines.push(
    '',
    'Download rate of a host by its transfers in flight (100 ms windows, first and last second left out):',
  );
  const rateRows = [...byConcurrency.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([open, rates]) => [
      String(open),
      String(rates.length),
      (rates.reduce((a, b) => a + b, 0) / rates.length).toFixed(1),
    ]);
  lines.push(...textTable(['in flight', 'windows', 'MB/s'], rateRows, [0, 1, 2]));

  lines.push('', 'Timeline: pieces held by the slowest and the average host, pieces anywhere in the swarm:');
  const storedAt = new Map<string, Map<number, number>>();
  for (const f of fetches) {
    const own = storedAt.get(f.host) ?? new Map<number, number>();
    for (let piece = f.piece; piece < f.piece + (f.pieces ?? 1); piece++)
      own.set(piece, Math.min(own.get(piece) ?? Infinity, f.storedMs));
    storedAt.set(f.host, own);
  }
  const timeline: string[][] = [];
  for (let second = 1; second <= Math.ceil(endMs / 1000); second++) {
    const t = second * 1000;
    const anywhere = new Set<number>();
    const held = hosts.map((host) => {
      let count = 0;
      for (const [piece, at] of storedAt.get(host) ?? []) {
        if (at > t) continue;
        count++;
        anywhere.add(piece);
      }
      return count;
    });
    const average = held.reduce((a, b) => a + b, 0) / held.length;
    timeline.push([String(second), String(Math.min(...held)), average.toFixed(0), String(anywhere.size)]);
  }
  lines.push(...textTable(['s', 'held min', 'held avg', 'anywhere'], timeline, [0, 1, 2, 3]));
  return lines.join('\n') + '\n';
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const dir = process.argv[2];
  if (dir === undefined) {
    process.stderr.write('usage: node dist/bench/trace-report.js LOGDIR (a fan-out run kept with --keep)\n');
    process.exitCode = 2;
  } else if (!existsSync(dir)) {
    process.stderr.write(
      `${dir}: no such directory (bench:fanout prints the logs directory it kept: "where the swarm's time went: ...")\n`,
    );
    process.exitCode = 2;
  } else {
    const fetches = readTrace(dir, process.argv[3]);
    if (fetches.length === 0) {
      process.stderr.write(`${dir}: no piece traces (run the agents with WEIGHTCAST_TRACE_PIECES=1)\n`);
      process.exitCode = 1;
    } else {
      const starts = readStartup(dir, process.argv[3]);
      process.stdout.write(
        report(fetches) + (starts === undefined ? '' : `${startupLines(starts).join('\n')}\n`),
      );
    }
  }
}
