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
import {
  corruptPieceText,
  createProgress,
  originRetryReporter,
  RETRY_SUMMARY_MS,
} from '../../src/cli/progress.js';
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
    assert.match(summary, /pulled 1 file, 3 B into /);
    assert.match(summary, /\(\d+(\.\d{1,2})? (B|KiB)\/s fetched/);
  } finally {
    await work.cleanup();
  }
});

test('origin retries: the first of a kind in full, then one summary per period, a new kind at once', () => {
  const lines: string[] = [];
  let now = 0;
  const report = originRetryReporter(
    (line) => lines.push(line),
    () => now,
  );
  const retry = (path: string, cause: string, attempt: number) =>
    report({
      path,
      attempt,
      delayMs: 100,
      elapsedMs: now,
      budgetMs: 60_000,
      reason: `read of ${path}: ${cause}`,
    });
  retry('a.safetensors', 'connect ECONNREFUSED', 1);
  assert.equal(lines.length, 1);
  assert.match(
    lines[0] ?? '',
    /^origin unavailable for a\.safetensors \(read of a\.safetensors: connect ECONNREFUSED\); retry 1 in 100 ms/,
  );
  // Sixteen reads in flight retrying the same failure within the period: nothing more.
  for (let read = 0; read < 16; read++) {
    now += 100;
    retry(`f${read % 4}.safetensors`, 'connect ECONNREFUSED', 2);
  }
  assert.equal(lines.length, 1);
  now = RETRY_SUMMARY_MS + 10;
  retry('f0.safetensors', 'connect ECONNREFUSED', 3);
  assert.equal(lines.length, 2);
  assert.equal(
    lines[1],
    'origin still unavailable (connect ECONNREFUSED): 17 retries of 4 files in the last 5 s; 5 s of 60 s waited',
  );
  // Another failure is news: shown at once, in full.
  now += 10;
  retry('f1.safetensors', 'HTTP 503', 1);
  assert.equal(lines.length, 3);
  assert.match(
    lines[2] ?? '',
    /^origin unavailable for f1\.safetensors \(read of f1\.safetensors: HTTP 503\)/,
  );
});

test('origin retries within a budget shorter than the summary period promise no summaries', () => {
  const lines: string[] = [];
  const report = originRetryReporter(
    (line) => lines.push(line),
    () => 0,
  );
  const reason = 'stat of model.safetensors.index.json: connect ECONNREFUSED 127.0.0.1:1';
  const event = { path: 'model.safetensors.index.json', attempt: 1, delayMs: 40, elapsedMs: 0, reason };
  report({ ...event, budgetMs: 3000 });
  assert.match(lines[0] ?? '', /; retry 1 in 40 ms, 0 s of 3 s waited$/);
  report({ ...event, path: 'config.json', reason: 'HTTP 503', budgetMs: 60_000 });
  assert.match(lines[1] ?? '', /, 0 s of 60 s waited \(while this goes on: a summary every 5 s\)$/);
});

test('a corrupt piece names where it is and who sent it, a peer by its URL', () => {
  const file = { path: 'model-00001-of-00002.safetensors', piece: 5 };
  assert.equal(
    corruptPieceText({ piece: 7, from: 'peer', parent: 'http://10.0.0.5:7100', file }),
    'piece 7 (model-00001-of-00002.safetensors piece 5) from peer http://10.0.0.5:7100 failed verification',
  );
  assert.equal(
    corruptPieceText({ piece: 7, from: 'origin', file }),
    'piece 7 (model-00001-of-00002.safetensors piece 5) from the origin failed verification',
  );
  assert.equal(corruptPieceText({ piece: 3, from: 'peer' }), 'piece 3 from a peer failed verification');
});
