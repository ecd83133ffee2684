/**
 * Where a rank's slices go. Every output is written under partial names and renamed only when the
 * whole rank is in and verified, so a failed load (a slice that does not match its plan manifest
 * digest, a read error, an abort) leaves nothing under a final name.
 *
 *  - `hf` and `shm`: safetensors files named like the source's shards, each holding the rank's
 *    tensors from that shard (slices contiguous, real vocabulary rows only), laid out widest dtype
 *    first so every tensor is aligned for zero-copy readers; a `model.safetensors.index.json` for these
 *    files when the source has one; the config and tokenizer files as they are; and
 *    `weightcast-rank.json`, which says which slice of which source tensor every tensor is. `shm`
 *    differs only in its default directory (under /dev/shm). `hf` refuses a directory holding
 *    model files it would not replace (another rank's or model's shards, an index it does not
 *    write) before writing anything: they would make a mix (format/model-directory.ts).
 *  - `sharded-state`: vLLM's `model-rank-{rank}-part-{part}.safetensors` (ShardedStateWriter), with
 *    the checkpoint's tensor names, plus the config and tokenizer files.
 */

import { WeightcastError } from '../../errors.js';
import { INDEX_FILE_NAME } from '../../format/index-json.js';
import { refuseStaleModelFiles } from '../../format/model-directory-file.js';
import { planSafetensorsLayout } from '../../format/safetensors-writer.js';
import type { ParallelPlan, RankPlan, RankTensor } from '../plan/types.js';
import { ShardedStateWriter } from '../sharded-state/writer.js';
import { OutputFiles } from '../stream/output-files.js';

export type SliceFormat = 'hf' | 'shm' | 'sharded-state';
export const RANK_DESCRIPTION_FILE = 'weightcast-rank.json';

export interface SliceOutput {
  /** A file written as it is (config, tokenizer); `declareFile` first. */
  writeFileBytes(path: string, start: number, bytes: Uint8Array): Promise<void>;
  writeTensor(tensor: RankTensor, bytes: Uint8Array): Promise<void>;
  finish(): Promise<string[]>;
  abandon(): Promise<void>;
}

export interface OutputInput {
  dir: string;
  format: SliceFormat;
  plan: ParallelPlan;
  rank: RankPlan;
  /** Files copied as they are, with their sizes. */
  copied: ReadonlyArray<{ path: string; size: number }>;
  /** Whether the source has a safetensors index (hf and shm then write one for the rank's files). */
  sourceHasIndex: boolean;
  partBytesMax?: number;
  signal?: AbortSignal;
}

export async function createSliceOutput(input: OutputInput): Promise<SliceOutput> {
  if (input.format === 'sharded-state') {
    const output = new ShardedStateOutput(input);
    // The parts hold the rank's tensors (and their small headers) beside the copied files.
    await output.files.checkSpace(input.rank.tensors.reduce((sum, tensor) => sum + tensor.bytes, 0));
    return output;
  }
  return RankFilesOutput.create(input);
}

/** `hf` and `shm`: the rank's tensors in files named like the source's, laid out before any arrives. */
class RankFilesOutput implements SliceOutput {
  private readonly files: OutputFiles;
  private readonly positions = new Map<string, { file: string; position: number }>();
  private readonly names: string[] = [];

  private constructor(private readonly input: OutputInput) {
    this.files = new OutputFiles(input.dir, { renameOnFinish: true });
  }

  static async create(input: OutputInput): Promise<RankFilesOutput> {
    const output = new RankFilesOutput(input);
    const byFile = new Map<string, RankTensor[]>();
    for (const tensor of input.rank.tensors)
      byFile.set(tensor.file, [...(byFile.get(tensor.file) ?? []), tensor]);
    // hf and shm alike: another model's shards must not stay beside the rank's files.
    const written = [...byFile.keys(), RANK_DESCRIPTION_FILE, ...input.copied.map((file) => file.path)];
    if (input.sourceHasIndex) written.push(INDEX_FILE_NAME);
    await refuseStaleModelFiles(input.dir, written);
    for (const file of input.copied) output.files.declare(file.path, file.size);
    const weightMap: Record<string, string> = {};
    let totalSize = 0;
    const layouts = [...byFile]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([file, tensors]) => {
        const layout = planSafetensorsLayout(
          tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.sliceShape })),
          { format: 'pt' },
        );
        output.files.declare(file, layout.fileSize);
        return { file, layout };
      });
    await output.files.checkSpace();
    for (const { file, layout } of layouts) {
      await output.files.write(file, 0, layout.header);
      for (const planned of layout.tensors) {
        output.positions.set(planned.name, { file, position: layout.dataStart + planned.begin });
        weightMap[planned.name] = file;
        totalSize += planned.end - planned.begin;
      }
      output.names.push(file);
    }
    if (input.sourceHasIndex) {
      const index = Buffer.from(
        JSON.stringify({ metadata: { total_size: totalSize }, weight_map: weightMap }, null, 2),
      );
      await output.writeWhole(INDEX_FILE_NAME, index);
    }
    await output.writeWhole(RANK_DESCRIPTION_FILE, describeRank(input.plan, input.rank));
    return output;
  }

  private async writeWhole(path: string, bytes: Buffer): Promise<void> {
    this.files.declare(path, bytes.length);
    await this.files.write(path, 0, bytes);
    this.names.push(path);
  }

  writeFileBytes(path: string, start: number, bytes: Uint8Array): Promise<void> {
    return this.files.write(path, start, bytes);
  }

  async writeTensor(tensor: RankTensor, bytes: Uint8Array): Promise<void> {
    const place = this.positions.get(tensor.name);
    if (place === undefined) {
      throw new WeightcastError('LOADER_INVALID_REQUEST', `no planned place for ${tensor.name}`, {
        tensor: tensor.name,
      });
    }
    await this.files.write(place.file, place.position, bytes);
  }

  async finish(): Promise<string[]> {
    await this.files.finish();
    return [...this.names, ...this.input.copied.map((file) => file.path)];
  }

  abandon(): Promise<void> {
    return this.files.abandon();
  }
}

/** `sharded-state`: parts as tensors arrive; copied files beside them. */
class ShardedStateOutput implements SliceOutput {
  private readonly writer: ShardedStateWriter;
  readonly files: OutputFiles;

  constructor(private readonly input: OutputInput) {
    this.writer = new ShardedStateWriter(input.dir, input.rank.rank, {
      ...(input.partBytesMax === undefined ? {} : { partBytesMax: input.partBytesMax }),
      ...(input.signal === undefined ? {} : { signal: input.signal }),
    });
    this.files = new OutputFiles(input.dir, { renameOnFinish: true });
    for (const file of input.copied) this.files.declare(file.path, file.size);
  }

  writeFileBytes(path: string, start: number, bytes: Uint8Array): Promise<void> {
    return this.files.write(path, start, bytes);
  }

  writeTensor(tensor: RankTensor, bytes: Uint8Array): Promise<void> {
    return this.writer.add(tensor.name, tensor.dtype, tensor.sliceShape, bytes);
  }

  async finish(): Promise<string[]> {
    const { files } = await this.writer.finish();
    await this.files.finish();
    return [...files, ...this.input.copied.map((file) => file.path)];
  }

  async abandon(): Promise<void> {
    await this.writer.abandon();
    await this.files.abandon();
  }
}

/** `weightcast-rank.json`: the layout and, for every tensor written, its source and slice. */
function describeRank(plan: ParallelPlan, rank: RankPlan): Buffer {
  const document = {
    format: 'weightcast-rank',
    version: 1,
    architecture: plan.architecture,
    tp: plan.tp,
    pp: plan.pp,
    ep: plan.ep,
    weights: plan.weights,
    rank: rank.rank,
    stage: rank.stage,
    tpRank: rank.tpRank,
    layers: rank.layers,
    experts: rank.experts,
    tensors: rank.tensors.map((t) => ({
      name: t.name,
      sourceFile: t.file,
      dtype: t.dtype,
      sourceShape: t.shape,
      shape: t.sliceShape,
      slice: t.slice,
    })),
  };
  return Buffer.from(JSON.stringify(document, null, 2) + '\n');
}
