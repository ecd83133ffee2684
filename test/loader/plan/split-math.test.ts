import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../../src/errors.js';
import {
  apportion,
  blockSpan,
  kvSpanFor,
  padVocab,
  pipelineSpans,
  splitSpans,
} from '../../../src/loader/plan/split-math.js';

test('apportion gives whole units by weight, the remainder to the largest remainders, ties to lower ranks', () => {
  assert.deepEqual(apportion(8, [3, 1]), [6, 2]);
  assert.deepEqual(apportion(14, [3, 1]), [11, 3]);
  // vLLM's expert placement: the first (experts % ep) ranks get one more.
  assert.deepEqual(apportion(10, [1, 1, 1, 1]), [3, 3, 2, 2]);
  // Quotas 3.5, 1.75, 1.75: floors 3, 1, 1, and the two larger remainders get the two units left.
  assert.deepEqual(apportion(7, [2, 1, 1]), [3, 2, 2]);
  for (const [units, weights] of [
    [100, [5, 3, 2]],
    [17, [1, 1, 1, 1, 1]],
    [3, [7, 1, 1]],
  ] as const) {
    assert.equal(
      apportion(units, weights).reduce((a, b) => a + b, 0),
      units,
    );
  }
});

test('pipeline stages split layers as vLLM get_pp_indices does', () => {
  assert.deepEqual(pipelineSpans(4, 2), [
    [0, 2],
    [2, 4],
  ]);
  // Remainder goes to the stages before the last, last-but-one first.
  assert.deepEqual(pipelineSpans(3, 2), [
    [0, 2],
    [2, 3],
  ]);
  assert.deepEqual(
    pipelineSpans(10, 4).map(([a, b]) => b - a),
    [2, 3, 3, 2],
  );
  // DeepSeek-V3's 61 layers over 8 stages: 7 each, 5 extra to stages 6, 5, 4, 3, 2.
  assert.deepEqual(
    pipelineSpans(61, 8).map(([a, b]) => b - a),
    [7, 7, 8, 8, 8, 8, 8, 7],
  );
});

test('even splits need exact division; weighted splits hand out whole units', () => {
  assert.deepEqual(splitSpans({ size: 8, unit: 1, weights: null, parts: 4, what: 'heads' }), [
    [0, 2],
    [2, 4],
    [4, 6],
    [6, 8],
  ]);
  assert.throws(
    () => splitSpans({ size: 8, unit: 1, weights: null, parts: 3, what: 'heads' }),
    (error) => isWeightcastError(error, 'PLAN_INDIVISIBLE'),
  );
  // 100 rows in units of 64: two units, the last partial.
  assert.deepEqual(splitSpans({ size: 100, unit: 64, weights: [1, 1], parts: 2, what: 'rows' }), [
    [0, 64],
    [64, 100],
  ]);
  assert.throws(
    () => splitSpans({ size: 4, unit: 1, weights: [100, 1], parts: 2, what: 'heads' }),
    (error) => isWeightcastError(error, 'PLAN_INDIVISIBLE'),
  );
});

test('KV heads follow their query heads; vocab pads to 64; block spans must align', () => {
  // 8 query heads, 2 KV heads, tp 4: ranks 0-1 share KV head 0, ranks 2-3 KV head 1.
  assert.deepEqual(kvSpanFor([0, 2], 8, 2), [0, 1]);
  assert.deepEqual(kvSpanFor([2, 4], 8, 2), [0, 1]);
  assert.deepEqual(kvSpanFor([4, 6], 8, 2), [1, 2]);
  // Uneven: query heads [0, 6) need both KV heads.
  assert.deepEqual(kvSpanFor([0, 6], 8, 2), [0, 2]);
  assert.equal(padVocab(1000), 1024);
  assert.equal(padVocab(128256), 128256);
  assert.equal(padVocab(129280), 129280);
  assert.equal(padVocab(151936), 151936);
  assert.deepEqual(blockSpan([256, 512], 1000, 128, 'w'), [2, 4]);
  assert.deepEqual(blockSpan([896, 1000], 1000, 128, 'w'), [7, 8]);
  assert.throws(
    () => blockSpan([0, 192], 384, 128, 'w'),
    (error) => isWeightcastError(error, 'PLAN_BLOCK_MISALIGNED'),
  );
});
