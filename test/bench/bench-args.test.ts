import { mock, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { BenchUsageError, flagNumber, readBenchArgs } from '../../bench/bench-args.js';

const USAGE = 'usage: bench:x [--size-mb N]';

/** Runs `readBenchArgs` with stdout and stderr captured and the exit code restored afterwards. */
function read(argv: string[], reader: (argv: string[]) => unknown = strictReader) {
  const out: string[] = [];
  const err: string[] = [];
  const exitCode = process.exitCode;
  const stdout = mock.method(process.stdout, 'write', (text: string) => out.push(text) > 0);
  const stderr = mock.method(process.stderr, 'write', (text: string) => err.push(text) > 0);
  try {
    const result = readBenchArgs('bench:x', USAGE, reader, argv);
    return { result, out: out.join(''), err: err.join(''), exitCode: process.exitCode };
  } finally {
    stdout.mock.restore();
    stderr.mock.restore();
    process.exitCode = exitCode;
  }
}

function strictReader(argv: string[]): { sizeMb: number } {
  const { values } = parseArgs({ args: argv, options: { 'size-mb': { type: 'string' } }, strict: true });
  return { sizeMb: flagNumber(values['size-mb'], '--size-mb', 64, { min: 16, max: 4096, integer: true }) };
}

test('a benchmark reads its flags, with defaults for those not given', () => {
  assert.deepEqual(read([]).result, { sizeMb: 64 });
  const given = read(['--size-mb', '256']);
  assert.deepEqual(given.result, { sizeMb: 256 });
  assert.equal(given.err, '');
  assert.equal(given.exitCode, undefined);
});

test('--help prints the usage and runs nothing, even beside other flags', () => {
  let ran = false;
  for (const argv of [['--help'], ['-h'], ['--size-mb', 'x', '--help']]) {
    const { result, out, exitCode } = read(argv, () => (ran = true));
    assert.equal(result, undefined);
    assert.equal(out, `${USAGE}\n`);
    assert.equal(exitCode, undefined);
  }
  assert.equal(ran, false);
});

test('an unknown flag, a missing value or a refused value stops it with one line and the usage (exit 2)', () => {
  const cases: Array<[string[], RegExp]> = [
    [['--size', '256'], /^bench:x: Unknown option '--size'/],
    [['--size-mb'], /^bench:x: Option '--size-mb <value>' argument missing/],
    [['--size-mb', '8'], /^bench:x: --size-mb must be an integer from 16 to 4096, not "8"\n/],
    [['--size-mb', '1.5'], /^bench:x: --size-mb must be an integer/],
    [['--size-mb', ''], /^bench:x: --size-mb must be an integer/],
    [['leftover'], /^bench:x: Unexpected argument 'leftover'/],
  ];
  for (const [argv, message] of cases) {
    const { result, err, exitCode } = read(argv);
    assert.equal(result, undefined, argv.join(' '));
    assert.match(err, message);
    assert.ok(err.endsWith(`\n${USAGE}\n`), err);
    assert.equal(exitCode, 2);
  }
  const refused = read([], () => {
    throw new BenchUsageError('--only must be stream or slice');
  });
  assert.equal(refused.err, `bench:x: --only must be stream or slice\n${USAGE}\n`);
  assert.equal(refused.exitCode, 2);
});

test('an error that is not about the flags is thrown on', () => {
  assert.throws(
    () =>
      read([], () => {
        throw new Error('disk on fire');
      }),
    /disk on fire/,
  );
});

test('a mistyped flag ends `npm run bench` before it writes its multi-GiB model', () => {
  const script = fileURLToPath(new URL('../../bench/foundation.js', import.meta.url));
  const before = new Set(readdirSync(tmpdir()));
  const run = spawnSync(process.execPath, [script, '--size', '64'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(run.status, 2, run.stderr);
  assert.match(run.stderr, /^bench: Unknown option '--size'/);
  assert.equal(run.stdout, '', 'nothing measured');
  const created = readdirSync(tmpdir()).filter(
    (name) => !before.has(name) && name.startsWith('weightcast-bench-'),
  );
  assert.deepEqual(created, []);
});
