/**
 * `--format hf`: the original Hugging Face layout, byte for byte. Every file of the model is
 * reproduced under its own name: safetensors files from their verified header and tensors, each
 * written at its original offset; config, tokenizer and index files from their verified chunks.
 */

import { WeightcastError } from '../../errors.js';
import type { ModelSource } from './model-source.js';
import { OutputFiles } from './output-files.js';
import type { LoadTag, RequestChoice } from './requests.js';
import type { Delivered } from './types.js';
import { WritePipeline } from './write-pipeline.js';

export const HF_REQUESTS: RequestChoice = { headers: true, otherFiles: true };

export class HfOutput {
  private readonly files: OutputFiles;
  private readonly writes = new WritePipeline();

  private constructor(dir: string, model: ModelSource) {
    this.files = new OutputFiles(dir);
    for (const file of model.files) this.files.declare(file.path, file.size);
  }

  /** The output, once the file system under `dir` was found to have room for the whole model. */
  static async create(dir: string, model: ModelSource): Promise<HfOutput> {
    const output = new HfOutput(dir, model);
    await output.files.checkSpace();
    return output;
  }

  /** Starts writing a delivered request (or part of one) at its offset; `finish` waits for it. */
  async write(delivered: Delivered<LoadTag>): Promise<void> {
    const { request } = delivered;
    const [range, ...more] = request.ranges;
    if (range === undefined || more.length > 0) {
      throw new WeightcastError(
        'LOADER_INVALID_REQUEST',
        `${request.file}: hf output takes one range per request`,
      );
    }
    const position = range.start + (delivered.part?.offset ?? 0);
    await this.writes.add(delivered, (bytes) => this.files.write(request.file, position, bytes));
  }

  async finish(): Promise<void> {
    await this.writes.drain();
    await this.files.finish();
  }

  async abandon(): Promise<void> {
    await this.writes.settle();
    await this.files.abandon();
  }
}
