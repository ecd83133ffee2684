/**
 * `load` refuses, before it writes a byte, an output directory whose file system lacks room for the
 * files it would write (shared memory is RAM: a model larger than it used to fill it part way). The
 * model is one sparse safetensors file one GiB larger than the temp file system's free space, so no
 * small file system is needed (no root) and it takes no room itself.
 */

import assert from 'node:assert/strict';
import { mkdir, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { isWeightcastError } from '../../../src/errors.js';
import { OutputFiles } from '../../../src/loader/stream/output-files.js';
import { freeSpaceAt } from '../../../src/util/free-space.js';
import { failingCli } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fixtures.js';

const NO_ROOM =
  /not enough free space for the model in .*: it needs [\d.]+ [GT]iB, the file system has [\d.]+ [GT]iB free; nothing was written/;

let work: { path: string; cleanup: () => Promise<void> };
let tooLarge: number;

before(async () => {
  work = await tempDir('output-space');
  tooLarge = (await freeSpaceAt(work.path)).freeBytes + 1024 * 1024 * 1024;
  // One U8 tensor of `tooLarge` bytes, sparse: a header, then a hole.
  const header = Buffer.from(
    JSON.stringify({ w: { dtype: 'U8', shape: [tooLarge], data_offsets: [0, tooLarge] } }),
  );
  const padded = Buffer.concat([header, Buffer.alloc((8 - (header.length % 8)) % 8, 0x20)]);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(padded.length));
  await mkdir(join(work.path, 'model'));
  const file = await open(join(work.path, 'model', 'model.safetensors'), 'w');
  try {
    await file.write(Buffer.concat([length, padded]));
    await file.truncate(8 + padded.length + tooLarge);
  } finally {
    await file.close();
  }
});

after(() => work.cleanup());

for (const format of ['hf', 'shm']) {
  test(`load --format ${format} refuses an output without room, naming both sizes, and writes nothing`, async () => {
    const to = join(work.path, `out-${format}`);
    const failed = await failingCli(['load', join(work.path, 'model'), '--format', format, '--to', to]);
    assert.equal(failed.code, 1, failed.stderr);
    assert.match(failed.stderr ?? '', new RegExp(`IO: ${NO_ROOM.source}`));
    assert.deepEqual(await readdir(to).catch(() => []), [], 'nothing written');
  });
}

test('output files count what the caller writes beside them and the partials they replace', async () => {
  const dir = join(work.path, 'files');
  const files = new OutputFiles(dir);
  files.declare('a.safetensors', 1024);
  await files.checkSpace();
  await assert.rejects(files.checkSpace(tooLarge), (error: unknown) => {
    assert.ok(isWeightcastError(error, 'IO'), String(error));
    assert.match(error.message, NO_ROOM);
    return true;
  });
  files.declare('b.safetensors', tooLarge);
  await assert.rejects(files.checkSpace(), NO_ROOM);
  assert.deepEqual(await readdir(dir).catch(() => []), [], 'a check writes nothing');
});
