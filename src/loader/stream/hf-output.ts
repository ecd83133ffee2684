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

export const HF_REQUESTS: RequestChoice = { headers: true, otherFiles: true };

export class HfOutput {
  private readonly files: OutputFiles;

  constructor(dir: string, model: ModelSource) {
    this.files = new OutputFiles(dir);
    for (const file of model.files) this.files.declare(file.path, file.size);
  }

  async write({ request, bytes }: Delivered<LoadTag>): Promise<void> {
    const [range, ...more] = request.ranges;
    if (range === undefined || more.length > 0) {
      throw new WeightcastError(
        'LOADER_INVALID_REQUEST',
        `${request.file}: hf output takes one range per request`,
      );
    }
    await this.files.write(request.file, range.start, bytes);
  }

  finish(): Promise<void> {
    return this.files.finish();
  }

  abandon(): Promise<void> {
    return this.files.abandon();
  }
}
