import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../src/errors.js';
import {
  SHARD_BYTES_TARGET,
  assignShards,
  defaultShardCount,
  shardFileName,
} from '../../src/synth/sharding.js';

test('shard names use five digits like Hugging Face', () => {
  assert.equal(shardFileName(0, 3), 'model-00001-of-00003.safetensors');
  assert.equal(shardFileName(162, 163), 'model-00163-of-00163.safetensors');
});

test('default shard count keeps shards near 2 GiB, at least one', () => {
  assert.equal(defaultShardCount(1), 1);
  assert.equal(defaultShardCount(SHARD_BYTES_TARGET), 1);
  assert.equal(defaultShardCount(SHARD_BYTES_TARGET + 1), 2);
  assert.equal(defaultShardCount(10 * SHARD_BYTES_TARGET), 10);
});

test('tensors stay in order, shards are non-empty and balanced by bytes', () => {
  const sizes = Array.from({ length: 200 }, (_, i) => 1000 + ((i * 7919) % 5000));
  for (const count of [1, 2, 3, 7, 200]) {
    const assignment = assignShards(sizes, count);
    assert.equal(assignment.length, sizes.length);
    const totals = new Array<number>(count).fill(0);
    assignment.forEach((shard, i) => {
      if (i > 0) assert.ok(shard === (assignment[i - 1] ?? 0) || shard === (assignment[i - 1] ?? 0) + 1);
      totals[shard] = (totals[shard] ?? 0) + (sizes[i] ?? 0);
    });
    assert.equal(assignment[0], 0);
    assert.equal(assignment.at(-1), count - 1);
    const mean = sizes.reduce((a, b) => a + b, 0) / count;
    if (count < 50)
      assert.ok(
        totals.every((total) => Math.abs(total - mean) < 6000),
        `${count}: ${totals.join()}`,
      );
  }
});

test('one huge tensor still leaves every shard non-empty', () => {
  const assignment = assignShards([10, 1_000_000, 10, 10], 4);
  assert.deepEqual(assignment, [0, 1, 2, 3]);
  assert.deepEqual(assignShards([1_000_000, 1, 1, 1], 2), [0, 1, 1, 1]);
});

test('more shards than tensors is refused', () => {
  assert.throws(
    () => assignShards([1, 2], 3),
    (error) => isWeightcastError(error, 'SYNTH_INVALID_OPTIONS'),
  );
});
