/**
 * The last steps of a verified file, shared by the pull and the piece store (src/piece/final-file.ts):
 * the rename to the final name never goes through a symlink or over a directory, and background
 * flushes start every WRITEBACK_BYTES but never for a file's last piece (its sync follows), and
 * their errors are not lost.
 */

import assert from 'node:assert/strict';
import { mkdir, open, readFile, stat, symlink, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { moveToFinalName, Writeback, WRITEBACK_BYTES, writeFully } from '../../src/piece/final-file.js';
import { tempDir } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };

before(async () => {
  work = await tempDir('final-file');
});

after(async () => {
  await work.cleanup();
});

async function partialFile(name: string, text: string): Promise<{ path: string; handle: FileHandle }> {
  const path = join(work.path, 'partial', name);
  await mkdir(join(work.path, 'partial'), { recursive: true });
  const handle = await open(path, 'w+');
  await writeFully(handle, Buffer.from(text), 0);
  return { path, handle };
}

describe('moveToFinalName', () => {
  it('moves a written file under its final name, in nested folders, and keeps the handle open', async () => {
    const { path, handle } = await partialFile('a.bin', 'weights');
    try {
      const dest = join(work.path, 'dest');
      const target = await moveToFinalName(handle, path, dest, 'sub/dir/a.bin');
      assert.equal(target, join(dest, 'sub/dir/a.bin'));
      assert.equal(await readFile(target, 'utf8'), 'weights');
      assert.equal(await stat(path).catch(() => undefined), undefined, 'the partial name is gone');
      const buffer = Buffer.alloc(7);
      await handle.read(buffer, 0, 7, 0);
      assert.equal(buffer.toString(), 'weights', 'the handle still reads the file');
    } finally {
      await handle.close();
    }
  });

  it('refuses a directory at the final name and a symlink on the way, moving nothing', async () => {
    const dest = join(work.path, 'dest2');
    await mkdir(join(dest, 'taken.bin'), { recursive: true });
    const first = await partialFile('b.bin', 'x');
    try {
      await assert.rejects(moveToFinalName(first.handle, first.path, dest, 'taken.bin'), {
        code: 'PULL_DESTINATION_CONFLICT',
      });
      assert.ok(await stat(first.path), 'the partial file is still there');
    } finally {
      await first.handle.close();
    }
    const elsewhere = join(work.path, 'elsewhere');
    await mkdir(elsewhere, { recursive: true });
    await symlink(elsewhere, join(dest, 'linked'));
    const second = await partialFile('c.bin', 'y');
    try {
      await assert.rejects(moveToFinalName(second.handle, second.path, dest, 'linked/c.bin'), {
        code: 'PULL_DESTINATION_SYMLINK',
      });
      assert.equal(await stat(join(elsewhere, 'c.bin')).catch(() => undefined), undefined);
    } finally {
      await second.handle.close();
    }
  });
});

describe('Writeback', () => {
  it('flushes every WRITEBACK_BYTES written, one flush at a time, and not for the last piece', async () => {
    const path = join(work.path, 'flushed.bin');
    await writeFile(path, '');
    const handle = await open(path, 'r+');
    let flushes = 0;
    // The real handle, counting its datasyncs.
    const counting = new Proxy(handle, {
      get(target, key) {
        if (key === 'datasync')
          return async () => {
            flushes++;
            await target.datasync();
          };
        const value = Reflect.get(target, key) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    try {
      const writeback = new Writeback(() => counting);
      writeback.wrote(WRITEBACK_BYTES - 1, false);
      assert.equal(flushes, 0);
      writeback.wrote(1, false);
      assert.equal(flushes, 0, 'the flush starts on a later turn');
      await writeback.settled();
      assert.equal(flushes, 1);
      writeback.wrote(WRITEBACK_BYTES, true);
      await writeback.settled();
      assert.equal(flushes, 1, 'no flush for the last piece: the sync before the rename follows');
    } finally {
      await handle.close();
    }
  });

  it("keeps a background flush's error for settled(), which the sync before the rename would not see", async () => {
    // Linux tells a writeback error (EIO) to one sync of an open file; the next one on it succeeds.
    const eio = Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    let syncs = 0;
    const failing = {
      datasync: () => (++syncs === 1 ? Promise.reject(eio) : Promise.resolve()),
    } as unknown as FileHandle;
    const writeback = new Writeback(() => failing);
    writeback.wrote(WRITEBACK_BYTES, false);
    await assert.rejects(writeback.settled(), eio);
    assert.equal(syncs, 1);
    await assert.rejects(writeback.settled(), eio, 'and again: the file must not be renamed into place');
  });
});
