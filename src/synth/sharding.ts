/**
 * How a model's tensors are split into Hugging Face shard files: in model order, never splitting a
 * tensor, balanced by bytes, every shard non-empty, named `model-00001-of-00004.safetensors`. Pure.
 */

import { invalidOptions } from './architectures.js';

/** Hugging Face's default `max_shard_size` is 5 GB; smaller shards spread better over a swarm. */
export const SHARD_BYTES_TARGET = 2 * 1024 ** 3;
/** Five digits in the file names. */
export const SHARDS_MAX = 99999;

export function defaultShardCount(tensorBytes: number): number {
  return Math.max(1, Math.ceil(tensorBytes / SHARD_BYTES_TARGET));
}

export function shardFileName(index: number, count: number): string {
  const pad = (value: number): string => String(value).padStart(5, '0');
  return `model-${pad(index + 1)}-of-${pad(count)}.safetensors`;
}

/**
 * The shard index of each tensor. A tensor goes to the shard its middle byte falls into (by the even
 * split of the total), except that a shard is closed early when exactly one tensor per remaining shard
 * is left, and kept open while it is still empty, so that no shard is ever empty.
 */
export function assignShards(tensorBytes: readonly number[], shardCount: number): number[] {
  if (!Number.isInteger(shardCount) || shardCount < 1 || shardCount > SHARDS_MAX) {
    throw invalidOptions(`shards must be an integer from 1 to ${SHARDS_MAX}, got ${shardCount}`);
  }
  if (shardCount > tensorBytes.length) {
    throw invalidOptions(`${shardCount} shards asked for a model of only ${tensorBytes.length} tensors`);
  }
  const total = tensorBytes.reduce((sum, bytes) => sum + bytes, 0);
  const assignment: number[] = [];
  let shard = 0;
  let shardTensors = 0;
  let before = 0;
  tensorBytes.forEach((bytes, index) => {
    const remainingTensors = tensorBytes.length - index;
    const remainingShards = shardCount - 1 - shard;
    const pastBoundary = (before + bytes / 2) * shardCount > (shard + 1) * total;
    if (shardTensors > 0 && remainingShards > 0 && (pastBoundary || remainingTensors <= remainingShards)) {
      shard += 1;
      shardTensors = 0;
    }
    assignment.push(shard);
    shardTensors += 1;
    before += bytes;
  });
  return assignment;
}
