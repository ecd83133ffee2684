import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { runCli } from '../../../src/cli/main.js';
import { memoryIo } from '../../../src/cli/io.js';
import { tempDir, writeSmallModel } from '../../helpers/fixtures.js';

test('load of a whole model refuses the flags of a one-rank load instead of ignoring them', async () => {
  const dir = await tempDir('cli-load-flags');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);
    const cases: Array<[string[], RegExp]> = [
      [['--order', 'random'], /USAGE: --order must be model or file, got "random"/],
      [['--pp', '0'], /USAGE: --pp must be a positive integer, got "0"/],
      [
        ['--order', 'file', '--pp', '2'],
        /USAGE: --pp, --order apply to loading one rank: give --tp and --rank/,
      ],
      // A digest with nothing to check it against was ignored (exit 0).
      [['--digest', 'sha256:' + '0'.repeat(64)], /USAGE: --digest checks the manifest given with --manifest/],
      [
        ['--tp', '1', '--rank', '0', '--plan-digest', 'sha256:abc'],
        /USAGE: --plan-digest checks the plan manifest given with --plan-manifest/,
      ],
    ];
    for (const [flags, message] of cases) {
      const io = memoryIo();
      const code = await runCli(
        ['load', model, '--format', 'hf', '--to', join(dir.path, 'out'), ...flags],
        io,
      );
      assert.equal(code, 2, flags.join(' '));
      assert.match(io.err.join(''), message);
    }
    // The same command without them loads.
    const plain = memoryIo();
    assert.equal(await runCli(['load', model, '--format', 'hf', '--to', join(dir.path, 'out')], plain), 0);
  } finally {
    await dir.cleanup();
  }
});
