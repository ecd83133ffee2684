/**
 * `--format shm`: the model's tensors in a shared-memory directory (by default under /dev/shm), as
 * safetensors files any safetensors reader opens. One output file per source safetensors file, with
 * the same name and tensors; other files (config, tokenizer, index) are copied as they are, so the
 * directory loads like the original.
 *
 * The files are laid out afresh rather than copied: the header is padded to 8 bytes and tensors are
 * ordered widest element first (safetensors-writer.ts), so every tensor starts at a multiple of its
 * element size and a reader can map it without copying. The layout is planned before any tensor
 * arrives; each tensor is then written at its planned offset as soon as it is delivered. The source
 * header's `__metadata__` is kept when it was read (no manifest); otherwise it is `{format: pt}`.
 */

import { planSafetensorsLayout, type SafetensorsLayout } from '../../format/safetensors-writer.js';
import { WeightcastError } from '../../errors.js';
import type { ModelSource } from './model-source.js';
import { OutputFiles } from './output-files.js';
import type { LoadTag, RequestChoice } from './requests.js';
import type { Delivered } from './types.js';

export const SHM_REQUESTS: RequestChoice = { headers: false, otherFiles: true };
export const SHM_ROOT_DEFAULT = '/dev/shm/weightcast';

export class ShmOutput {
  private readonly files: OutputFiles;
  private readonly layouts = new Map<string, { layout: SafetensorsLayout; begins: Map<string, number> }>();

  private constructor(dir: string) {
    this.files = new OutputFiles(dir);
  }

  static async create(dir: string, model: ModelSource): Promise<ShmOutput> {
    const output = new ShmOutput(dir);
    for (const file of model.files) {
      const index = model.safetensors.get(file.path);
      if (index === undefined) {
        output.files.declare(file.path, file.size);
        continue;
      }
      const layout = planSafetensorsLayout(
        index.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })),
        index.metadata ?? { format: 'pt' },
      );
      const begins = new Map(layout.tensors.map((t) => [t.name, layout.dataStart + t.begin]));
      output.layouts.set(file.path, { layout, begins });
      output.files.declare(file.path, layout.fileSize);
      await output.files.write(file.path, 0, layout.header);
    }
    return output;
  }

  async write({ request, bytes }: Delivered<LoadTag>): Promise<void> {
    const { tag } = request;
    if (tag.kind === 'chunk') {
      await this.files.write(request.file, tag.start, bytes);
      return;
    }
    if (tag.kind !== 'tensor') return;
    const position = this.layouts.get(request.file)?.begins.get(tag.tensor.name);
    if (position === undefined) {
      throw new WeightcastError(
        'LOADER_INVALID_REQUEST',
        `${request.file}: no planned place for ${tag.tensor.name}`,
        {
          file: request.file,
          tensor: tag.tensor.name,
        },
      );
    }
    await this.files.write(request.file, position, bytes);
  }

  finish(): Promise<void> {
    return this.files.finish();
  }

  abandon(): Promise<void> {
    return this.files.abandon();
  }
}
