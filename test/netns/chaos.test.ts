import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ChaosUsageError,
  diskFullBytes,
  faultAtMs,
  faultTargets,
  parseChaosOptions,
  parseRows,
  ROW_TIMEOUT_MIN_MS,
  ROWS,
  rowTimeoutMs,
  KILL_AFTER_STOP_MS,
  SCHEDULER_STOP_MS,
} from '../../bench/chaos/plan.js';
import {
  chaosTable,
  checkCopy,
  hostCompleted,
  pullError,
  summarizeRow,
  type HostOutcome,
  type RowResult,
} from '../../bench/chaos/report.js';
import type { VerifyReport } from '../../src/manifest/verify.js';

const MiB = 1024 * 1024;

test('by default every row runs, fault-free first, on 8 hosts at 200 Mbit/s with a 256 MiB model', () => {
  const options = parseChaosOptions([], 'work-dir');
  assert.notEqual(options, 'help');
  if (options === 'help') return;
  assert.deepEqual(options.rows, [...ROWS]);
  assert.equal(options.rows[0], 'none');
  assert.equal(options.hosts, 8);
  assert.equal(options.mbps, 200);
  assert.equal(options.sizeMb, 256);
  assert.equal(options.work, 'work-dir');
  assert.equal(options.loopback, false);
  assert.deepEqual(options.ring, [], 'the scheduler plans per piece unless asked');
});

test('--per-piece, --ring-chain and --ring-push reach the scheduler; --ring-chain says both', () => {
  const flags = (argv: string[]): string[] => {
    const options = parseChaosOptions(argv, 'w');
    return options === 'help' ? [] : options.ring;
  };
  assert.deepEqual(flags(['--ring-push']), ['--ring-push']);
  assert.deepEqual(flags(['--ring-chain']), ['--ring-chain']);
  assert.deepEqual(flags(['--ring-push', '--ring-chain']), ['--ring-chain']);
  assert.deepEqual(flags(['--per-piece']), ['--per-piece']);
  assert.deepEqual(flags([]), [], "by default the scheduler's own plan");
});

test('--rows keeps the run order and always adds the fault-free reference; unknown rows and too few hosts are refused', () => {
  assert.deepEqual(parseRows('disk-full,kill-agents'), ['none', 'kill-agents', 'disk-full']);
  assert.deepEqual(parseRows('none'), ['none']);
  assert.throws(() => parseRows('kill-everything'), ChaosUsageError);
  assert.throws(() => parseChaosOptions(['--hosts', '3'], 'w'), ChaosUsageError);
  assert.throws(() => parseChaosOptions(['--size-mb', 'big'], 'w'), ChaosUsageError);
  assert.equal(parseChaosOptions(['--help'], 'w'), 'help');
});

test('the faults hit distinct hosts, a quarter of them killed (rounded up), the same for the same seed', () => {
  for (const hosts of [4, 5, 8, 13, 200]) {
    for (const seed of [0, 1, 2, 99]) {
      const targets = faultTargets(hosts, seed);
      assert.equal(targets.killed.length, Math.ceil(hosts / 4));
      const all = [...targets.killed, targets.corrupt, targets.diskFull];
      assert.equal(new Set(all).size, all.length, `distinct at ${hosts} hosts, seed ${seed}`);
      assert.ok(all.every((index) => Number.isInteger(index) && index >= 0 && index < hosts));
      assert.deepEqual(
        [...targets.killed].sort((a, b) => a - b),
        targets.killed,
      );
      assert.deepEqual(faultTargets(hosts, seed), targets);
    }
  }
  const picks = new Set([1, 2, 3, 4, 5, 6].map((seed) => JSON.stringify(faultTargets(8, seed))));
  assert.ok(picks.size > 1, 'the seed changes which hosts are hit');
  assert.throws(() => faultTargets(2, 1), RangeError);
});

test('timed faults fire at 30 % of the fault-free time; rows get at least two minutes plus the fault', () => {
  assert.equal(faultAtMs('kill-agents', 14_000), 4200);
  assert.equal(faultAtMs('origin-503', 10_000), 3000);
  assert.equal(faultAtMs('none', 14_000), undefined);
  assert.equal(faultAtMs('corrupt-peer', 14_000), undefined);
  assert.equal(rowTimeoutMs('none', 1000), ROW_TIMEOUT_MIN_MS);
  assert.equal(rowTimeoutMs('stop-scheduler', 60_000), 4 * 60_000 + SCHEDULER_STOP_MS);
  // Both faults of the combined row fall inside the stop.
  assert.equal(faultAtMs('stop-scheduler-kill', 10_000), 3000);
  assert.equal(rowTimeoutMs('stop-scheduler-kill', 60_000), 4 * 60_000 + SCHEDULER_STOP_MS);
  assert.ok(KILL_AFTER_STOP_MS > 5000 && KILL_AFTER_STOP_MS < SCHEDULER_STOP_MS);
  assert.equal(diskFullBytes(256 * MiB), 64 * MiB);
  assert.equal(diskFullBytes(1000), MiB);
});

const report = (files: VerifyReport['files']): VerifyReport => ({
  ok: false,
  files,
  bytesChecked: 0,
  extraFiles: [],
});

test('corrupt bytes: bad pieces at their length (the last one short), a wrong-size file whole, missing files none', () => {
  const check = checkCopy(
    report([
      { path: 'a', verdict: 'ok', expectedSize: 10 * MiB, actualSize: 10 * MiB, badPieces: [] },
      // 2.5 pieces of 1 MiB: piece 0 whole, piece 2 the last half.
      { path: 'b', verdict: 'corrupt', expectedSize: 2.5 * MiB, actualSize: 2.5 * MiB, badPieces: [0, 2] },
      { path: 'c', verdict: 'size-mismatch', expectedSize: 100, actualSize: 7, badPieces: [] },
      { path: 'd', verdict: 'missing', expectedSize: 5 * MiB, badPieces: [] },
    ]),
    MiB,
  );
  assert.deepEqual(check, { files: 4, filesOk: 1, corruptBytes: MiB + 0.5 * MiB + 7 });
});

const host = (label: string, seconds: number | undefined, extra: Partial<HostOutcome> = {}): HostOutcome => ({
  label,
  seconds,
  starts: 1,
  copy: { files: 3, filesOk: seconds === undefined ? 0 : 3, corruptBytes: 0 },
  ...extra,
});

test('a row is ok when every host completed with no corrupt byte; its wall time is the last host', () => {
  const row: RowResult = {
    kind: 'kill-agents',
    fault: 'kill -9 host2',
    hosts: [host('host1', 10), host('host2', 14, { starts: 2 })],
    originBytes: 1010,
  };
  const summary = summarizeRow(row, 1000);
  assert.equal(summary.ok, true);
  assert.equal(summary.result, 'ok');
  assert.equal(summary.completed, 2);
  assert.equal(summary.wallSeconds, 14);
  assert.equal(summary.originRatio, 1.01);
  assert.equal(summary.corruptBytes, 0);
});

test('a corrupt byte, a host that did not finish, or a pull that exited 0 with bad files fail the row', () => {
  const corrupt = summarizeRow(
    {
      kind: 'corrupt-peer',
      fault: '',
      hosts: [host('host1', 10, { copy: { files: 3, filesOk: 2, corruptBytes: 512 } })],
      originBytes: 1,
    },
    1,
  );
  assert.equal(corrupt.ok, false);
  assert.match(corrupt.result, /^FAILED: 512 corrupt bytes delivered; host1: pull exited 0 but 1 of 3 files/);
  assert.equal(corrupt.completed, 0);
  const stuck = summarizeRow(
    {
      kind: 'restart-scheduler',
      fault: '',
      hosts: [host('host1', 9), host('host2', undefined, { error: 'still running' })],
      originBytes: 1,
    },
    1,
  );
  assert.equal(stuck.ok, false);
  assert.equal(stuck.result, 'FAILED: host2: still running');
  assert.equal(stuck.wallSeconds, 9);
  assert.equal(
    hostCompleted({ label: 'host1', seconds: 1, starts: 1 }),
    false,
    'an unchecked copy is not complete',
  );
});

test("disk-full: the expected host's IO is ok and said so; any other ending, or its completion, fails", () => {
  const base = {
    kind: 'disk-full' as const,
    fault: 'host3 on a 64 MiB tmpfs',
    originBytes: 1,
    expectedFailure: { host: 1, code: 'IO' },
  };
  const expected = summarizeRow(
    { ...base, hosts: [host('host1', 10), host('host3', undefined, { error: 'IO (ENOSPC)' })] },
    1,
  );
  assert.equal(expected.ok, true);
  assert.equal(expected.result, 'ok; host3: IO (ENOSPC) as expected');
  assert.equal(expected.completed, 1);
  const other = summarizeRow(
    {
      ...base,
      hosts: [host('host1', 10), host('host3', undefined, { error: 'ORIGIN_RETRIES_EXHAUSTED: x' })],
    },
    1,
  );
  assert.equal(other.ok, false);
  const completed = summarizeRow({ ...base, hosts: [host('host1', 10), host('host3', 12)] }, 1);
  assert.equal(completed.ok, false);
  assert.match(completed.result, /host3 completed, expected IO/);
  const skipped = summarizeRow({ ...base, hosts: [], skipped: 'needs root' }, 1);
  assert.deepEqual([skipped.ok, skipped.result], [true, 'not run: needs root']);
});

test("a pull's error in a few words from its --json output", () => {
  const io = JSON.stringify({
    event: 'error',
    error: { code: 'IO', message: 'write x: ENOSPC: no space left on device' },
  });
  assert.equal(pullError(`{"event":"progress"}\n${io}\n`), 'IO (ENOSPC)');
  const other = JSON.stringify({
    event: 'error',
    error: { code: 'ORIGIN_NOT_FOUND', message: 'model/a: 404' },
  });
  assert.equal(pullError(other), 'ORIGIN_NOT_FOUND: model/a: 404');
  assert.equal(pullError('{"event":"done"}\nnot json'), undefined);
});

test('the table puts every row against the fault-free one', () => {
  const row = (kind: RowResult['kind'], seconds: number): ReturnType<typeof summarizeRow> =>
    summarizeRow({ kind, fault: '-', hosts: [host('host1', seconds)], originBytes: 100 }, 100);
  const lines = chaosTable([row('none', 10), row('origin-503', 25)]);
  assert.equal(lines.length, 3);
  assert.match(
    lines[0] ?? '',
    /^row\s+fault\s+hosts done\s+wall\s+x fault-free\s+origin \/ S\s+corrupt bytes\s+result$/,
  );
  assert.match(lines[1] ?? '', /^fault-free .* 1\/1\s+10\.0 s\s+1\.00\s+1\.000\s+0\s+ok$/);
  assert.match(lines[2] ?? '', /^origin 503 .* 1\/1\s+25\.0 s\s+2\.50\s+1\.000\s+0\s+ok$/);
});
