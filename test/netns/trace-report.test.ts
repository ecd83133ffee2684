import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import {
  CLOCK_FILE,
  concurrencyShares,
  originSummary,
  pairGaps,
  pairingShares,
  parentRecency,
  readStartup,
  readTrace,
  report,
  startupLines,
  windowRates,
  type Fetch,
} from '../../bench/trace-report.js';

test('concurrencyShares: share of sampled instants with k spans open', () => {
  // 0-100 ms: one span; 100-200: two; 200-300: none (10 ms samples).
  const spans = [
    { startMs: 0, endMs: 200 },
    { startMs: 100, endMs: 200 },
  ];
  assert.deepEqual(
    concurrencyShares(spans, 0, 300).map((share) => Math.round(share * 30)),
    [10, 10, 10],
  );
});

test('pairingShares: top parents share and cold pair starts, origin pieces left out', () => {
  const fetch = (parent: string, startMs: number, endMs: number): Fetch => ({
    host: 'h',
    piece: 0,
    bytes: 1,
    parent,
    startMs,
    endMs,
    storedMs: endMs,
  });
  const shares = pairingShares([
    fetch('origin', 0, 100),
    fetch('a', 0, 100),
    fetch('a', 150, 250), // warm: 'a' ended 50 ms before
    fetch('a', 1000, 1100), // cold: 750 ms gap
    fetch('b', 0, 100),
    fetch('c', 0, 100),
    fetch('d', 0, 100),
    fetch('e', 0, 100),
    fetch('e', 90, 300), // warm: overlaps the previous one
  ]);
  // 8 peer pieces: a 3, e 2, then b/c/d one each -> top 4 = 3 + 2 + 1 + 1 = 7 of 8.
  assert.equal(shares.top, 7 / 8);
  // Cold: a@0, a@1000, b, c, d, e@0 = 6 of 8.
  assert.equal(shares.cold, 6 / 8);
  assert.ok(Number.isNaN(pairingShares([fetch('origin', 0, 1)]).top));
});

test("parentRecency: the parent's transfers stored between its copy and the peer's request", () => {
  const fetch = (
    host: string,
    parent: string,
    piece: number,
    startMs: number,
    storedMs: number,
    pieces = 1,
  ): Fetch => ({
    host,
    piece,
    ...(pieces > 1 ? { pieces } : {}),
    bytes: 1,
    parent,
    startMs,
    endMs: storedMs,
    storedMs,
  });
  const recency = parentRecency([
    fetch('a', 'origin', 0, 0, 10, 2), // a: pieces 0-1 (one run) at 10
    fetch('a', 'origin', 2, 0, 20), // a: piece 2 at 20
    fetch('a', 'origin', 3, 0, 30), // a: piece 3 at 30
    fetch('b', 'a', 1, 35, 40), // two newer runs at a (2 and 3): 2
    fetch('b', 'a', 3, 31, 45), // a's newest: 0
    fetch('c', 'a', 2, 25, 50), // asked at 25: piece 3 not yet stored there: 0
    fetch('c', 'b', 9, 60, 70), // b never stored piece 9 in the trace: left out
  ]);
  assert.deepEqual(recency, [2, 0, 0]);
});

test('readTrace and report: the busiest model, parents by URL, times from the first request, verified pieces only', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'wc-trace-'));
  try {
    const piece = (at: number, fields: Record<string, unknown>): string =>
      JSON.stringify({
        at,
        type: 'piece',
        outcome: 'verified',
        bytes: 1_000_000,
        ms: 100,
        verifyMs: 10,
        ...fields,
      });
    await writeFile(
      join(dir, 'agent-host1.log'),
      [
        'weightcast agent listening on http://10.0.0.2:7001',
        piece(1110, { piece: 0, from: 'origin' }),
        piece(90, { piece: 0, from: 'origin', model: 'bb22' }),
        JSON.stringify({ at: 1200, type: 'piece', outcome: 'failed', piece: 1, bytes: 0, ms: 5 }),
        '{"cut short',
      ].join('\n'),
    );
    await writeFile(
      join(dir, 'agent-host2.log'),
      [
        'weightcast agent listening on http://10.0.0.3:7001/',
        piece(1260, { piece: 0, parent: 'http://10.0.0.2:7001' }),
      ].join('\n'),
    );
    const fetches = readTrace(dir).sort((a, b) => a.startMs - b.startMs);
    assert.deepEqual(
      fetches.map((f) => [f.host, f.parent, f.startMs, f.endMs, f.storedMs]),
      [
        ['host1', 'origin', 0, 100, 110],
        ['host2', 'host1', 150, 250, 260],
      ],
    );
    assert.deepEqual(
      readTrace(dir, 'bb').map((f) => [f.host, f.startMs]),
      [['host1', 0]],
      'another model, when asked for by prefix',
    );
    const text = report(fetches);
    assert.match(text, /2 verified transfers to 2 hosts; last stored at 0\.26 s/);
    assert.match(text, /^host1 +1 +1 +- +- /m);
    assert.match(text, /^host2 +1 +0 +100 +100 /m);
    assert.match(
      text,
      /Origin: 1 transfers, 1\.0 MB from its first request \(0 ms\) to its last byte \(0\.10 s\): 10\.00 MB\/s\./,
    );
    assert.match(text, /Hosts: last piece 0\.01-0\.16 s after the origin's last byte/);
    // host1's one piece came from the origin (no peer rate); host2's came from host1 in 100 ms.
    assert.match(text, /^host1 +1 +1 +- +- +0\.\d\d +\d+\.\d\d +- /m);
    assert.doesNotMatch(text, /Origin in 250 ms windows/, 'the origin span (100 ms) holds no whole window');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('readTrace: a run of pieces (a transfer unit) is one transfer of its bytes, its pieces all held', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'wc-trace-run-'));
  try {
    const event = (piece: number, at: number): string =>
      JSON.stringify({
        at,
        type: 'piece',
        outcome: 'verified',
        model: 'cc',
        piece,
        bytes: 500_000,
        ms: 100,
        waitMs: 20,
        verifyMs: at - 1100,
        run: { first: 4, pieces: 2, bytes: 1_000_000 },
      });
    await writeFile(
      join(dir, 'agent-host1.log'),
      ['weightcast agent listening on http://10.0.0.2:7001', event(4, 1105), event(5, 1110)].join('\n'),
    );
    const fetches = readTrace(dir);
    assert.deepEqual(
      fetches.map((f) => [f.piece, f.pieces, f.bytes, f.startMs, f.endMs]),
      [[4, 2, 1_000_000, 0, 100]],
    );
    const text = report(fetches);
    assert.match(text, /^1 +2 +2 +2$/m, 'both pieces held at 1 s');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('originSummary: the origin span and rate, each host lag after the origin and mean rate', () => {
  const fetch = (host: string, parent: string, startMs: number, endMs: number, bytes: number): Fetch => ({
    host,
    piece: 0,
    bytes,
    parent,
    startMs,
    endMs,
    storedMs: endMs + 5,
  });
  const summary = originSummary([
    fetch('a', 'origin', 0, 400, 2_000_000),
    fetch('b', 'origin', 100, 500, 2_000_000),
    fetch('b', 'a', 400, 995, 2_000_000),
    fetch('a', 'b', 500, 795, 2_000_000),
  ]);
  assert.ok(summary !== undefined);
  assert.equal(summary.transfers, 2);
  assert.equal(summary.bytes, 4_000_000);
  assert.equal(summary.firstMs, 0);
  assert.equal(summary.lastMs, 500);
  assert.equal(summary.rate, 8_000_000, '4 MB over 0.5 s');
  assert.deepEqual(
    summary.hosts.map((h) => [h.host, h.doneMs, h.lagMs, h.rate]),
    [
      ['a', 800, 300, 5_000_000],
      ['b', 1000, 500, 4_000_000],
    ],
  );
  assert.equal(originSummary([fetch('a', 'b', 0, 10, 1)]), undefined, 'no origin transfers');
});

test('pairGaps: idle time between consecutive transfers on a pair, pipelined or not; needs first bytes', () => {
  const fetch = (parent: string, startMs: number, firstByteMs: number | undefined, endMs: number): Fetch => ({
    host: 'h',
    piece: 0,
    bytes: 1,
    parent,
    startMs,
    ...(firstByteMs === undefined ? {} : { firstByteMs }),
    endMs,
    storedMs: endMs,
  });
  const gaps = pairGaps([
    fetch('a', 0, 20, 100),
    fetch('a', 90, 102, 180), // asked at 90, before the last byte at 100: pipelined, idle 2 ms
    fetch('a', 200, 230, 300), // asked after 180: idle 50 ms
    fetch('b', 0, 10, 50), // another pair: its own sequence
    fetch('b', 40, 50, 90), // pipelined, idle 0
    fetch('origin', 0, 5, 10), // origin transfers left out
    fetch('origin', 20, 25, 30),
  ]);
  assert.deepEqual(gaps, { pipelined: [2, 0], after: [50] });
  assert.equal(pairGaps([fetch('a', 0, undefined, 10), fetch('a', 20, 30, 40)]), undefined, 'older traces');
});

test('trace-report run on a directory that does not exist says so and exits 2, without a stack', () => {
  const script = fileURLToPath(new URL('../../bench/trace-report.js', import.meta.url));
  const missing = join(tmpdir(), `weightcast-no-such-logs-${process.pid}`);
  const run = spawnSync(process.execPath, [script, missing], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(run.status, 2);
  assert.match(run.stderr, /no such directory/);
  assert.doesNotMatch(run.stderr, /\n\s+at /);
});

test('windowRates: each transfer spread evenly from its first byte to its last, per window', () => {
  const fetch = (startMs: number, firstByteMs: number | undefined, endMs: number, bytes: number): Fetch => ({
    host: 'h',
    piece: 0,
    bytes,
    parent: 'origin',
    startMs,
    ...(firstByteMs === undefined ? {} : { firstByteMs }),
    endMs,
    storedMs: endMs,
  });
  // 1 MB over [100, 300) ms: 0.5 MB in each of the windows [0, 200) and [200, 400); a second
  // transfer of 0.4 MB over [250, 450) (its request at 0, its first byte at 250) adds 0.3 MB to the
  // second window (150 ms of its 200) and 0.1 MB to the third.
  const rates = windowRates([fetch(100, undefined, 300, 1e6), fetch(0, 250, 450, 0.4e6)], 0, 600, 200);
  assert.equal(rates.length, 3);
  assert.ok(Math.abs(rates[0]! - 0.5e6 / 0.2) < 1, `window 0: ${rates[0]}`);
  assert.ok(Math.abs(rates[1]! - 0.8e6 / 0.2) < 1, `window 1: ${rates[1]}`);
  assert.ok(Math.abs(rates[2]! - 0.1e6 / 0.2) < 1, `window 2: ${rates[2]}`);
  assert.deepEqual(windowRates([], 0, 100, 250), [0], 'a span shorter than a window is one window');
});

test("readStartup and startupLines: each host's steps after the clock, the origin's first request", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'wc-trace-'));
  try {
    const line = (at: number, fields: Record<string, unknown>): string => JSON.stringify({ at, ...fields });
    await writeFile(
      join(dir, 'agent-host1.log'),
      [
        'weightcast agent listening on http://10.0.0.2:7001',
        line(1500, { type: 'listening' }),
        line(2100, { type: 'joined', model: 'aa11' }),
        line(2150, { type: 'registered', model: 'aa11' }),
        // Requested at 2400 - 10 - 100 = 2290 ms, from the origin; a later one from a peer.
        line(2400, { type: 'piece', model: 'aa11', outcome: 'verified', ms: 100, verifyMs: 10 }),
        line(2600, { type: 'piece', model: 'aa11', outcome: 'verified', ms: 100, parent: 'http://x' }),
        line(2000, { type: 'piece', model: 'aa11', outcome: 'failed', ms: 500 }),
      ].join('\n'),
    );
    await writeFile(
      join(dir, 'agent-host2.log'),
      [
        line(1600, { type: 'listening' }),
        line(2500, { type: 'piece', outcome: 'verified', ms: 200, parent: 'p' }),
      ].join('\n'),
    );
    assert.equal(readStartup(dir), undefined, 'no clock file: no start-up');
    await writeFile(join(dir, CLOCK_FILE), JSON.stringify({ startedAt: 1000 }));
    const starts = readStartup(dir);
    assert.deepEqual(starts, [
      {
        host: 'host1',
        listening: 500,
        joined: 1100,
        registered: 1150,
        firstRequest: 1290,
        firstOriginRequest: 1290,
      },
      { host: 'host2', listening: 600, firstRequest: 1300 },
    ]);
    const text = startupLines(starts ?? []).join('\n');
    assert.match(text, /the origin's first request came at 1\.29 s/);
    assert.match(text, /^host1 +0\.50 +1\.10 +1\.15 +1\.29$/m);
    assert.match(text, /^host2 +0\.60 +- +- +1\.30$/m);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
