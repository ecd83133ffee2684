/**
 * The scheduler's default plan on real processes: a swarm short enough for its model forms one
 * chain, and the host that would make the chain too long turns every host per piece while pieces
 * are being pushed (ring-plan.ts `autoChainMembersMax`). Every copy must still be exact.
 */

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { buildManifest } from '../../src/manifest/build.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { synthesizeModel } from '../../src/synth/synth.js';
import { autoChainMembersMax } from '../../src/swarm/core/ring-plan.js';
import { Cluster } from '../../scripts/cluster.js';
import { identicalToOrigin } from '../../scripts/swarm-demo-check.js';
import { tempDir } from '../helpers/fixtures.js';

const PIECE = 1024 * 1024;
let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let size: number;

before(async () => {
  work = await tempDir('chain-outgrown');
  modelDir = join(work.path, 'origin');
  // 40 MiB: a chain of 2 at most (0.03 x 40 MiB / 512 KiB = 2.4).
  const model = await synthesizeModel({
    dir: modelDir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: 40 * 1024 * 1024,
    shards: 2,
    seed: 5,
  });
  size = model.totalBytes;
  const local = new LocalOrigin(modelDir);
  manifest = await buildManifest(local, { pieceSize: PIECE }).finally(() => local.close());
});

after(async () => {
  await work.cleanup();
});

it('by default two hosts form a chain; a third turns all three per piece mid-run, and every copy is exact', async () => {
  assert.equal(autoChainMembersMax(size), 2, `a ${size}-byte model allows a chain of 2`);
  const cluster = await Cluster.start({
    modelDir,
    manifest,
    workDir: join(work.path, 'run'),
    hosts: 3,
    hostMbps: 40,
    originMbps: 40,
  });
  try {
    const started = performance.now();
    await cluster.join(0);
    await cluster.join(1);
    const fed = await cluster.untilHeld(1, 4);
    assert.ok(fed.held >= 4 && fed.held < fed.pieceCount / 2, `agent 1 held ${fed.held} pieces`);
    assert.deepEqual(
      (await cluster.schedulerStatus()).ring,
      { members: 2, fed: 1, cut: 0 },
      'one chain of two',
    );
    await cluster.join(2);
    await cluster.waitComplete([0, 1, 2], started, 60_000);
    for (const i of [0, 1, 2])
      assert.ok(
        await identicalToOrigin(cluster.cacheFilesDir(i), modelDir, manifest),
        `agent ${i}'s copy differs from the origin`,
      );
    const status = await cluster.schedulerStatus();
    assert.deepEqual(status.ring, { members: 0, fed: 0, cut: 0 }, 'no chain any more');
    // Per piece from then on: the scheduler planned transfers for the pieces agent 1 still lacked.
    assert.ok(
      status.transfersVerified > manifest.files.reduce((sum, file) => sum + file.pieces.length, 0),
      `${status.transfersVerified} transfers planned`,
    );
    // The scheduler said so, both times.
    const said = cluster.scheduler.lines.join('\n');
    assert.match(said, /planned one chain up to 2 hosts, then per piece/);
    assert.match(said, /planned per piece \(outgrew one chain\) from now on/);
    const statuses = await Promise.all([0, 1, 2].map((i) => cluster.status(i)));
    const origin = statuses.reduce((sum, s) => sum + s.originBytes, 0);
    assert.ok(origin <= 1.25 * size, `the origin sent ${origin / size} x S`);
  } finally {
    await cluster.close();
  }
});
