/** vLLM `sharded_state` output: per-rank safetensors parts, shared by `load` and the pre-sharder. */

export {
  PART_BYTES_MAX_DEFAULT,
  ShardedStateWriter,
  shardedStateFileName,
  type ShardedStatePart,
  type ShardedStateResult,
  type ShardedStateWriterOptions,
} from './writer.js';
