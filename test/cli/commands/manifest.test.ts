import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { runCli } from '../../../src/cli/main.js';
import { memoryIo } from '../../../src/cli/io.js';
import { tempDir, writeSmallModel } from '../../helpers/fixtures.js';

test('manifest --out that cannot be written is refused before anything is hashed', async () => {
  const dir = await tempDir('cli-manifest-out');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);
    const missing = memoryIo();
    assert.equal(await runCli(['manifest', model, '--out', join(dir.path, 'nope', 'x.json')], missing), 2);
    assert.match(missing.err.join(''), /USAGE: --out .*nope.x\.json: directory .*nope does not exist/);
    // No progress line: the model was not read.
    assert.doesNotMatch(missing.out.join('') + missing.err.join(''), /hashing/);

    await mkdir(join(dir.path, 'a-dir'));
    const onDir = memoryIo();
    assert.equal(await runCli(['manifest', model, '--out', join(dir.path, 'a-dir')], onDir), 2);
    assert.match(onDir.err.join(''), /USAGE: --out .*a-dir: is a directory/);
  } finally {
    await dir.cleanup();
  }
});

test('manifest --threads above 4 per core is refused before any worker starts', async () => {
  const dir = await tempDir('cli-manifest-threads');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);
    const many = memoryIo();
    assert.equal(
      await runCli(['manifest', model, '--threads', String(4 * availableParallelism() + 1)], many),
      2,
    );
    assert.match(many.err.join(''), /USAGE: --threads \d+ is more than 4 per core/);
    const most = memoryIo();
    assert.equal(await runCli(['manifest', model, '--threads', String(4 * availableParallelism())], most), 0);
  } finally {
    await dir.cleanup();
  }
});
