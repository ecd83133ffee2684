import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../src/errors.js';
import { checkFreeSpace, spaceNeeded } from '../../src/util/free-space.js';

const BLOCK = 4096;

test('space needed counts whole blocks and the largest running total in write order', () => {
  assert.equal(spaceNeeded([], BLOCK), 0);
  assert.equal(spaceNeeded([{ bytes: 1, replacedBytes: 0 }], BLOCK), BLOCK);
  assert.equal(
    spaceNeeded(
      [
        { bytes: 10 * BLOCK, replacedBytes: 0 },
        { bytes: BLOCK + 1, replacedBytes: 0 },
      ],
      BLOCK,
    ),
    12 * BLOCK,
  );
  // A replaced file's blocks are freed when it is truncated, before its new bytes go in.
  assert.equal(spaceNeeded([{ bytes: 10 * BLOCK, replacedBytes: 10 * BLOCK }], BLOCK), 0);
  // The same total in a different order peaks differently: the first file grows before the second shrinks.
  const grows = { bytes: 8 * BLOCK, replacedBytes: 2 * BLOCK };
  const shrinks = { bytes: 2 * BLOCK, replacedBytes: 8 * BLOCK };
  assert.equal(spaceNeeded([grows, shrinks], BLOCK), 6 * BLOCK);
  assert.equal(spaceNeeded([shrinks, grows], BLOCK), 0);
});

test('a model larger than the free space is refused with IO naming both sizes', () => {
  const files = [{ bytes: 3 * 1024 * 1024, replacedBytes: 0 }];
  assert.doesNotThrow(() =>
    checkFreeSpace({ dir: 'out', files, blockBytes: BLOCK, freeBytes: 3 * 1024 * 1024 }),
  );
  assert.throws(
    () => checkFreeSpace({ dir: 'out', files, blockBytes: BLOCK, freeBytes: 1024 * 1024 }),
    (error) =>
      isWeightcastError(error, 'IO') &&
      error.message ===
        'not enough free space for the model in out: it needs 3.00 MiB, the file system has 1.00 MiB free; nothing was written' &&
      error.details['neededBytes'] === 3 * 1024 * 1024 &&
      error.details['freeBytes'] === 1024 * 1024,
  );
  const replacing = [{ bytes: 3 * 1024 * 1024, replacedBytes: 1024 * 1024 }];
  assert.throws(
    () =>
      checkFreeSpace({
        dir: 'out',
        files: replacing,
        blockBytes: BLOCK,
        freeBytes: 1024 * 1024,
        beyond: ' more than the files it replaces',
      }),
    /it needs 2\.00 MiB more than the files it replaces/,
  );
});
