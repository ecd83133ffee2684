/**
 * `python/bench_torch_load.py` and its TypeScript side (`bench/torch-baseline.ts`) on a tiny synthetic
 * model: the script's JSON must parse into the schema the benchmark reads, count the same bytes as the
 * TypeScript side, and turn into rows. Timings are not checked; benchmarks print them. Skipped, with the
 * reason, when the interpreter has no torch.
 */

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { synthesizeModel } from '../../src/synth/index.js';
import {
  measureTorchBaseline,
  pythonInterpreter,
  torchBaselineRows,
  torchProblem,
  torchRows,
} from '../../bench/torch-baseline.js';

const PYTHON = pythonInterpreter();

describe('torch baselines for bench:load', () => {
  let scratch = '';
  let skipReason: string | undefined;

  before(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'weightcast-torch-baseline-'));
    skipReason = await torchProblem(PYTHON);
  });
  after(() => rm(scratch, { recursive: true, force: true }));

  test('measures torch.load and the zero-copy reader on the same tensors, then makes rows', async (t) => {
    if (skipReason !== undefined) {
      t.skip(skipReason);
      return;
    }
    const dir = join(scratch, 'model');
    const model = await synthesizeModel({
      dir,
      arch: 'llama',
      dtype: 'bf16',
      sizeBytes: 1024 * 1024,
      seed: 5,
    });
    const cachePath = join(scratch, 'model.pt');
    const measured = await measureTorchBaseline(dir, { python: PYTHON, cachePath });
    assert.ok(!('skipped' in measured), 'torch was found but the script skipped');
    assert.equal(measured.tensor_bytes, model.tensorBytes);
    assert.equal(measured.tensors, model.tensorCount);
    assert.equal(measured.torch_load.bytes, model.tensorBytes, 'torch.load returned other bytes');
    assert.equal(measured.reader.bytes, model.tensorBytes, 'the reader returned other bytes');
    assert.equal(measured.reader.copied_tensors, 0);
    assert.equal(measured.cache.reused, false);
    assert.ok(existsSync(cachePath));
    assert.deepEqual(
      (await readdir(scratch)).filter((name) => name.includes('partial')),
      [],
      'a partial cache file was left',
    );
    for (const variant of [measured.torch_load, measured.reader]) {
      assert.ok(variant.seconds > 0 && variant.peak_rss_bytes > 0);
    }
    const rows = torchRows(measured, { streamingLoadSeconds: 0.5 });
    assert.equal(rows[0]?.baseline, 'torch.load, weights_only');
    assert.equal(rows[0]?.goal, '>= 5.0');
    assert.equal(rows.at(-1)?.unit, 'bytes');
    assert.equal(rows.length, 'skipped' in measured.torch_load_mmap ? 3 : 4);
  });

  test('no torch: no rows, and the reason is given', async () => {
    const reasons: string[] = [];
    const missing = existsSync('/dev/null') ? '/dev/null/python3' : join(scratch, 'no-python');
    const rows = await torchBaselineRows(scratch, {
      python: missing,
      onSkip: (reason) => reasons.push(reason),
    });
    assert.equal(rows, null);
    assert.equal(reasons.length, 1);
    assert.match(reasons[0] ?? '', /cannot run/);
  });
});
