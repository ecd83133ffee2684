/**
 * writeRangeSync: a range's whole blocks go past the page cache when asked and possible, its last
 * partial block through it, and the file holds exactly the bytes either way; a file system that
 * refuses O_DIRECT gets them buffered.
 */

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { DIRECT_ALIGNMENT, addressAlignedBuffer, writeRangeSync } from '../../src/util/direct-write.js';
import { tempDir } from '../helpers/fixtures.js';

test('writeRangeSync: whole blocks direct, the tail buffered, the bytes exact', async () => {
  const dir = await tempDir('direct-write');
  try {
    const path = join(dir.path, 'data');
    const size = 4 * DIRECT_ALIGNMENT + 100;
    await writeFile(path, Buffer.alloc(size));
    const bytes = randomBytes(3 * DIRECT_ALIGNMENT + 100);
    const aligned = addressAlignedBuffer(bytes.length);
    if (aligned === undefined) {
      console.log('# direct writes not checked: the native helper is not built here');
    } else {
      assert.equal(aligned.length, bytes.length);
      aligned.set(bytes);
      const result = writeRangeSync(path, aligned, DIRECT_ALIGNMENT, true);
      // Past the page cache where the file system takes O_DIRECT; refused (and buffered) where not.
      assert.equal(result.directBytes, result.refused ? 0 : 3 * DIRECT_ALIGNMENT);
      const back = await readFile(path);
      assert.ok(back.subarray(DIRECT_ALIGNMENT).equals(bytes));
      assert.ok(back.subarray(0, DIRECT_ALIGNMENT).every((byte) => byte === 0));
    }
    const again = randomBytes(DIRECT_ALIGNMENT + 7);
    assert.deepEqual(writeRangeSync(path, again, 0, false), { directBytes: 0, refused: false });
    assert.ok((await readFile(path)).subarray(0, again.length).equals(again));
  } finally {
    await dir.cleanup();
  }
});
