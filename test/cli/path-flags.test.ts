/**
 * A path flag that names the wrong kind of thing is bad usage (exit 2) with a message saying which
 * flag and why, not an IO error from deep inside the command (EEXIST from a mkdir, ENOTDIR, ENOENT):
 * `agent --cache` and `pull --to` naming a regular file, a `--manifest` that does not exist. Real
 * processes; nothing is contacted, as the flags are checked first.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CLI } from '../../scripts/cluster.js';
import { tempDir, writeSmallModel } from '../helpers/fixtures.js';

const run = promisify(execFile);

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let file: string;

/** No server listens on port 9 of this machine (discard): a command that used it would fail. */
const NOBODY = 'http://127.0.0.1:9';

before(async () => {
  work = await tempDir('path-flags');
  modelDir = join(work.path, 'origin');
  await writeSmallModel(modelDir);
  file = join(work.path, 'a-file');
  await writeFile(file, 'not a directory\n');
});

after(async () => {
  await work.cleanup();
});

async function failing(args: string[], env?: NodeJS.ProcessEnv): Promise<{ code: number; stderr: string }> {
  return run(process.execPath, [CLI, ...args], {
    timeout: 30_000,
    ...(env === undefined ? {} : { env }),
  }).then(
    () => assert.fail(`weightcast ${args.join(' ')} should fail`),
    (error: { code?: number; stderr?: string }) => ({ code: error.code ?? -1, stderr: error.stderr ?? '' }),
  );
}

const routes: Record<string, string[]> = {
  'from the origin': ['--no-agent'],
  '--scheduler': ['--scheduler', NOBODY],
  '--agent': ['--agent', NOBODY],
};

describe('agent --cache naming a regular file', { timeout: 30_000 }, () => {
  it('is a usage error saying --cache is not a directory', async () => {
    const failed = await failing(['agent', '--scheduler', NOBODY, '--cache', file, '--port', '0']);
    assert.equal(failed.code, 2, failed.stderr);
    assert.match(failed.stderr, /USAGE: --cache .*a-file is a file, not a directory/);
    assert.equal(await readFile(file, 'utf8'), 'not a directory\n');
  });

  it('or a path through a regular file, likewise', async () => {
    const failed = await failing([
      'agent',
      '--scheduler',
      NOBODY,
      '--cache',
      join(file, 'cache'),
      '--port',
      '0',
    ]);
    assert.equal(failed.code, 2, failed.stderr);
    assert.match(failed.stderr, /USAGE: --cache .*a-file\/cache is not a directory: .*a-file is a file/);
  });
});

describe('pull --to naming a regular file', { timeout: 60_000 }, () => {
  const manifestPath = (): string => join(work.path, 'manifest.json');
  before(async () => {
    await run(process.execPath, [CLI, 'manifest', modelDir, '--out', manifestPath()], { timeout: 30_000 });
  });

  for (const [route, args] of Object.entries(routes)) {
    it(`${route}: a usage error saying --to is a file, not a directory`, async () => {
      const failed = await failing(['pull', modelDir, '--to', file, '--manifest', manifestPath(), ...args]);
      assert.equal(failed.code, 2, failed.stderr);
      assert.match(failed.stderr, /USAGE: --to .*a-file is a file, not a directory/);
      assert.equal(await readFile(file, 'utf8'), 'not a directory\n');
    });
  }

  it('without --manifest too (before the source is hashed)', async () => {
    const failed = await failing(['pull', modelDir, '--to', file, '--no-agent']);
    assert.equal(failed.code, 2, failed.stderr);
    assert.match(failed.stderr, /USAGE: --to .*a-file is a file, not a directory/);
  });
});

describe('a --manifest that does not exist', { timeout: 60_000 }, () => {
  for (const [route, args] of Object.entries(routes)) {
    it(`pull ${route}: a usage error naming the missing manifest, nothing created`, async () => {
      const dest = join(work.path, 'dest');
      const failed = await failing([
        'pull',
        modelDir,
        '--to',
        dest,
        '--manifest',
        join(work.path, 'nonexist.json'),
        ...args,
      ]);
      assert.equal(failed.code, 2, failed.stderr);
      assert.match(failed.stderr, /USAGE: the manifest .*nonexist\.json does not exist/);
      assert.equal(existsSync(dest), false);
    });
  }

  it('pull looking for a local agent: said before any agent is looked for', async () => {
    const failed = await failing(
      ['pull', modelDir, '--to', join(work.path, 'dest'), '--manifest', join(work.path, 'nonexist.json')],
      { ...process.env, WEIGHTCAST_AGENT: NOBODY },
    );
    assert.equal(failed.code, 2, failed.stderr);
    assert.match(failed.stderr, /USAGE: the manifest .*nonexist\.json does not exist/);
    assert.doesNotMatch(failed.stderr, /agent/);
  });

  it('verify: the same', async () => {
    const failed = await failing(['verify', modelDir, '--manifest', join(work.path, 'nonexist.json')]);
    assert.equal(failed.code, 2, failed.stderr);
    assert.match(failed.stderr, /USAGE: the manifest .*nonexist\.json does not exist/);
  });

  it('a directory given as the manifest: a usage error too', async () => {
    const failed = await failing([
      'pull',
      modelDir,
      '--to',
      join(work.path, 'dest'),
      '--manifest',
      modelDir,
      '--no-agent',
    ]);
    assert.equal(failed.code, 2, failed.stderr);
    assert.match(failed.stderr, /USAGE: the manifest .*origin is a directory, not a file/);
  });
});
