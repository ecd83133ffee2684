import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cp, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { runCli } from '../../../src/cli/main.js';
import { memoryIo } from '../../../src/cli/io.js';
import { tempDir, writeSmallModel } from '../../helpers/fixtures.js';

test('verify says a directory standing for a file is not a file, and notes files the manifest lacks', async () => {
  const dir = await tempDir('cli-verify');
  try {
    const model = join(dir.path, 'model');
    const copy = join(dir.path, 'copy');
    const manifest = join(dir.path, 'm.json');
    await writeSmallModel(model);
    assert.equal(await runCli(['manifest', model, '--out', manifest], memoryIo()), 0);
    await cp(model, copy, { recursive: true });

    // Extra files (and a pull's hidden state directory, not looked into): a note, still exit 0.
    await writeFile(join(copy, 'extra.bin'), 'x');
    await mkdir(join(copy, '.weightcast'));
    await writeFile(join(copy, '.weightcast', 'pull.json'), '{}');
    const extra = memoryIo();
    assert.equal(await runCli(['verify', copy, '--manifest', manifest], extra), 0);
    assert.match(
      extra.out.join(''),
      /^note: 1 file in .*copy not in the manifest \(not checked\): extra\.bin$/m,
    );
    assert.match(extra.out.join(''), /verified: all 5 files match/);

    await rm(join(copy, 'config.json'));
    await mkdir(join(copy, 'config.json'));
    const directory = memoryIo();
    assert.equal(await runCli(['verify', copy, '--manifest', manifest, '--json'], directory), 1);
    const report = JSON.parse(directory.out.join('').trim().split('\n').at(-1) ?? '') as {
      files: Array<{ path: string; verdict: string }>;
      extraFiles: string[];
    };
    assert.equal(report.files.find((file) => file.path === 'config.json')?.verdict, 'not-a-file');
    assert.deepEqual(report.extraFiles, ['extra.bin']);
  } finally {
    await dir.cleanup();
  }
});
