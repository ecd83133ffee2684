/**
 * `--format shm`: the model's tensors in a shared-memory directory (by default under /dev/shm), as
 * safetensors files any safetensors reader opens. One output file per source safetensors file, with
 * the same name and tensors; other files (config, tokenizer, index) are copied as they are, so the
 * directory loads like the original.
 *
 * The files are laid out afresh rather than copied: the header is padded to 8 bytes and tensors are
 * ordered widest element first (safetensors-writer.ts), so every tensor starts at a multiple of its
 * element size and a reader can map it without copying. The layout is planned before any tensor
 * arrives; each tensor (or part of one, with `partBytes`) is then written at its planned offset as
 * soon as it is delivered. The source
 * header's `__metadata__` is kept when it was read (no manifest); otherwise it is `{format: pt}`.
 */

import { planSafetensorsLayout, type SafetensorsLayout } from '../../format/safetensors-writer.js';
import { WeightcastError } from '../../errors.js';
import type { ModelSource } from './model-source.js';
import { SHM_ROOT_DEFAULT } from './defaults.js';
import { OutputFiles } from './output-files.js';
import type { LoadTag, RequestChoice } from './requests.js';
import type { Delivered } from './types.js';
import { WritePipeline } from './write-pipeline.js';

export const SHM_REQUESTS: RequestChoice = { headers: false, otherFiles: true };
export { SHM_ROOT_DEFAULT };

export class ShmOutput {
  private readonly files: OutputFiles;
  private readonly writes = new WritePipeline();
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
    }
    // Shared memory is RAM: a model larger than it is refused before it takes any.
    await output.files.checkSpace();
    for (const [path, { layout }] of output.layouts) await output.files.write(path, 0, layout.header);
    return output;
  }

  /**
   * Starts writing a delivered request (or part of one) at its planned place; a few writes run at
   * once while the stream reads on (write-pipeline.ts). `finish` waits for all of them.
   */
  async write(delivered: Delivered<LoadTag>): Promise<void> {
    const { request } = delivered;
    const { tag } = request;
    const partOffset = delivered.part?.offset ?? 0;
    if (tag.kind === 'chunk') {
      const position = tag.start + partOffset;
      await this.writes.add(delivered, (bytes) => this.files.write(request.file, position, bytes));
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
    const at = position + partOffset;
    await this.writes.add(delivered, (bytes) => this.files.write(request.file, at, bytes));
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
