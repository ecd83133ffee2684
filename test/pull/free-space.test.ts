/**
 * A model larger than the destination's free space is refused before a byte is fetched or written:
 * by a pull from the origin, by an agent asked to write into a destination, and by a pull that will
 * copy the files out of an agent's cache. The model is a manifest one GiB larger than the temp file
 * system's free space (its pieces are never fetched), so no small file system is needed (no root).
 * A disk that fills during a transfer is test/swarm-system/disk-full.test.ts's (root).
 */

import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { isWeightcastError } from '../../src/errors.js';
import { manifestDigest, writeManifest, type Manifest } from '../../src/manifest/manifest.js';
import { merkleRoot } from '../../src/manifest/merkle.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { checkPlaceSpace } from '../../src/pull/place.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { freeSpaceAt } from '../../src/util/free-space.js';
import { failingCli } from '../helpers/cli.js';
import { smallModelWithManifest, tempDir } from '../helpers/fixtures.js';

const PIECE = 64 * 1024 * 1024;

let work: { path: string; cleanup: () => Promise<void> };
let origin: FileServer;
let huge: Manifest;
let hugePath: string;

before(async () => {
  work = await tempDir('free-space');
  const { modelDir } = await smallModelWithManifest(work.path);
  origin = await startFileServer({ root: modelDir });
  // One GiB more than this process may use on the file system the tests write to.
  const { freeBytes } = await freeSpaceAt(work.path);
  const size = freeBytes + 1024 * 1024 * 1024;
  const pieces = Array.from({ length: Math.ceil(size / PIECE) }, (_, i) => i.toString(16).padStart(64, '0'));
  huge = {
    pieceSize: PIECE,
    files: [{ path: 'model.safetensors', size, merkleRoot: merkleRoot(pieces), pieces }],
  };
  hugePath = join(work.path, 'huge.json');
  await writeManifest(hugePath, huge);
});

after(async () => {
  await origin.close();
  await work.cleanup();
});

const NO_ROOM =
  /not enough free space for the model in .*: it needs [\d.]+ [GT]iB, the file system has [\d.]+ [GT]iB free; nothing was written/;

test('a pull from the origin is refused before it fetches, naming both sizes, and leaves nothing', async () => {
  const dest = join(work.path, 'plain');
  const sentBefore = origin.stats.bytesSent;
  const failed = await failingCli(['pull', origin.url, '--to', dest, '--manifest', hugePath, '--no-agent']);
  assert.equal(failed.code, 1, failed.stderr);
  assert.match(failed.stderr ?? '', new RegExp(`IO: ${NO_ROOM.source}`));
  assert.equal(origin.stats.bytesSent, sentBefore, 'no byte was fetched');
  assert.equal((await readdir(work.path)).includes('plain'), false, 'no destination folder left behind');
});

test('an agent asked to write into a destination without room refuses the join and writes nothing there', async () => {
  const agent = await Agent.start({
    schedulerUrl: 'http://127.0.0.1:9',
    cacheDir: join(work.path, 'cache'),
    destinationRoots: [work.path],
  });
  try {
    const dest = join(work.path, 'through-agent');
    await assert.rejects(agent.join({ source: origin.url, manifest: huge, to: dest }), (error: unknown) => {
      assert.ok(isWeightcastError(error, 'IO'), String(error));
      assert.match(error.message, NO_ROOM);
      return true;
    });
    const left = await readdir(dest, { recursive: true }).catch(() => []);
    assert.deepEqual(left, [], `left in the destination: ${left.join(', ')}`);
    const hex = manifestDigest(huge).slice('sha256:'.length);
    assert.throws(() => agent.status(hex), 'the agent holds no such model');
    // Nor a job a restart would resume: the join never happened.
    assert.equal(
      (await readdir(join(work.path, 'cache'))).includes(hex),
      false,
      'no model folder in the cache',
    );
  } finally {
    await agent.close();
  }
});

test('files to copy out of a cache on another file system need room; on the same one they may not', async () => {
  const dest = join(work.path, 'placed');
  // The cache's file system unknown (or another one): the copy would fill this one.
  await assert.rejects(checkPlaceSpace(undefined, dest, huge), (error: unknown) => {
    assert.ok(isWeightcastError(error, 'IO'), String(error));
    assert.match(error.message, NO_ROOM);
    return true;
  });
  // The same file system: a reflink or hard link takes no room, and a copy's ENOSPC says it later.
  await checkPlaceSpace(work.path, dest, huge);
});
