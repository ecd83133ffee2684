/**
 * Output files written out of order: tensors arrive in completion order and each lands at its own
 * offset with a positioned write. A file is written under `<name>.weightcast-partial`, counted byte
 * by byte, and renamed to its final name only when every byte of it has been written, so a file
 * under its final name is always complete. With `renameOnFinish` no file is renamed before `finish`,
 * so a failure part way leaves no file of the set under its final name. `abandon` closes everything
 * and removes the partials.
 */

import { mkdir, open, rename, rm, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { WeightcastError, assert } from '../../errors.js';
import { assertSafeRelativePath } from '../../util/safe-path.js';
import { allocatedBytes, checkFreeSpace, freeSpaceAt } from '../../util/free-space.js';

export const PARTIAL_SUFFIX = '.weightcast-partial';

interface OutputFile {
  path: string;
  size: number;
  handle: Promise<FileHandle> | undefined;
  written: number;
  done: boolean;
}

export class OutputFiles {
  private readonly files = new Map<string, OutputFile>();

  constructor(
    private readonly dir: string,
    private readonly options: { renameOnFinish?: boolean } = {},
  ) {}

  /** Declares a file of `size` bytes, to be written by positioned writes. */
  declare(path: string, size: number): void {
    assertSafeRelativePath(path, this.dir);
    this.files.set(path, { path, size, handle: undefined, written: 0, done: false });
  }

  async write(path: string, position: number, bytes: Uint8Array): Promise<void> {
    const file = this.files.get(path);
    assert(file !== undefined && !file.done, `output file ${path} is declared and open`);
    if (position + bytes.length > file.size) {
      throw new WeightcastError('IO', `${path}: write past the end of the ${file.size}-byte output`, {
        file: path,
      });
    }
    const handle = await this.handleOf(file);
    let done = 0;
    while (done < bytes.length) {
      const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, position + done);
      done += bytesWritten;
    }
    file.written += bytes.length;
    if (file.written === file.size && this.options.renameOnFinish !== true) await this.complete(file);
  }

  /**
   * IO before a byte is written when the file system under `dir` lacks room for every file declared
   * so far plus `moreBytes` (what the caller writes beside them): each is written in full beside
   * any file of its name (renamed over it when complete), less the blocks of an earlier run's
   * partial it truncates.
   */
  async checkSpace(moreBytes = 0): Promise<void> {
    const files = await Promise.all(
      [...this.files.values()].map(async (file) => ({
        bytes: file.size,
        replacedBytes: Math.min(file.size, await allocatedBytes(this.partialPath(file))),
      })),
    );
    checkFreeSpace({
      dir: this.dir,
      files: [...files, { bytes: moreBytes, replacedBytes: 0 }],
      ...(await freeSpaceAt(this.dir)),
      beyond: " beyond an earlier run's partial files",
    });
  }

  /** Every declared file must be complete. */
  async finish(): Promise<void> {
    for (const file of this.files.values()) {
      if (file.done) continue;
      if (file.written !== file.size) {
        throw new WeightcastError(
          'IO',
          `${file.path}: ${file.size - file.written} bytes were never written`,
          {
            file: file.path,
          },
        );
      }
      await this.complete(file);
    }
  }

  async abandon(): Promise<void> {
    for (const file of this.files.values()) {
      if (file.done || file.handle === undefined) continue;
      await file.handle.then((handle) => handle.close()).catch(() => undefined);
      await rm(this.partialPath(file), { force: true });
    }
  }

  private handleOf(file: OutputFile): Promise<FileHandle> {
    file.handle ??= (async () => {
      const partial = this.partialPath(file);
      await mkdir(dirname(partial), { recursive: true });
      const handle = await open(partial, 'w');
      await handle.truncate(file.size);
      return handle;
    })();
    return file.handle;
  }

  private async complete(file: OutputFile): Promise<void> {
    const handle = await this.handleOf(file);
    await handle.close();
    file.done = true;
    await rename(this.partialPath(file), join(this.dir, file.path));
  }

  private partialPath(file: OutputFile): string {
    return join(this.dir, file.path + PARTIAL_SUFFIX);
  }
}
