/**
 * Sizes and rates as a user reads them (issue 16, finding 7: a 3-byte file was shown fetched at
 * "0 B/s", and rates under 1 KiB/s printed every digit of a float).
 */

import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { memoryIo } from '../../src/cli/io.js';
import { runCli } from '../../src/cli/main.js';
import { createProgress } from '../../src/cli/progress.js';
import { formatBytes, formatRate } from '../../src/util/units.js';
import { tempDir } from '../helpers/fixtures.js';

test('sizes and rates under 1 KiB are whole bytes or two digits, never 0 for something', () => {
  assert.equal(formatBytes(3), '3 B');
  assert.equal(formatBytes(0), '0 B');
  assert.equal(formatRate(3, 0.236), '12.7 B/s');
  assert.equal(formatRate(3, 0.7), '4.29 B/s');
  assert.equal(formatBytes(1536), '1.50 KiB');
});

test('the progress bar counts a first update that finishes the work towards the rate', () => {
  const io = { ...memoryIo(), stderrIsTTY: true };
  const fresh = createProgress(io, 'pulling', false);
  fresh.update(3, 3);
  const line = io.err.join('');
  assert.match(line, /3 B\/3 B /);
  assert.doesNotMatch(line, / 0 B\/s/);
  // A resumed run leaves what was there before out of the rate.
  const resumedIo = { ...memoryIo(), stderrIsTTY: true };
  const resumed = createProgress(resumedIo, 'pulling', false);
  resumed.startFrom(3);
  resumed.update(3, 3);
  assert.match(resumedIo.err.join(''), / 0 B\/s/);
});

test('pull of a 3-byte file reports 3 B and a readable rate', async () => {
  const work = await tempDir('three-bytes');
  try {
    await mkdir(join(work.path, 'src'));
    await writeFile(join(work.path, 'src', 'x.bin'), 'abc');
    const io = memoryIo();
    const code = await runCli(
      ['pull', join(work.path, 'src'), '--to', join(work.path, 'dst'), '--no-agent'],
      io,
    );
    assert.equal(code, 0, io.err.join(''));
    const summary = io.out.join('');
    assert.match(summary, /pulled 1 files, 3 B into /);
    assert.match(summary, /\(\d+(\.\d{1,2})? (B|KiB)\/s fetched/);
  } finally {
    await work.cleanup();
  }
});
