/**
 * `pull --scheduler` served by a peer that corrupts what it uploads: a swarm of processes on loopback
 * (origin file server, scheduler, one agent started with `--inject-corrupt-uploads` that already holds
 * the model) and a pull process of the CLI. Every piece the peer sends fails verification and is
 * fetched again; the pull ends byte-identical to the origin, counts the corrupt pieces in its summary
 * and names the peer that sent each one.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CLI, Cluster } from '../../scripts/cluster.js';
import { identicalToOrigin } from '../../scripts/swarm-demo-check.js';
import { buildManifest } from '../../src/manifest/build.js';
import { writeManifest, type Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { synthesizeModel } from '../../src/synth/synth.js';
import { tempDir } from '../helpers/fixtures.js';

const run = promisify(execFile);
const PIECE = 64 * 1024;
const WAIT_MS_MAX = 20_000;

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let manifestPath: string;

before(async () => {
  work = await tempDir('scheduler-pull-corrupt-peer');
  modelDir = join(work.path, 'origin');
  await synthesizeModel({
    dir: modelDir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: 2 << 20,
    shards: 2,
    seed: 13,
  });
  const local = new LocalOrigin(modelDir);
  manifest = await buildManifest(local, { pieceSize: PIECE }).finally(() => local.close());
  manifestPath = join(work.path, 'manifest.json');
  await writeManifest(manifestPath, manifest);
});

after(async () => {
  await work.cleanup();
});

describe('pull --scheduler with a peer that corrupts its uploads', { timeout: 60_000 }, () => {
  it('ends byte-identical and reports the corrupt pieces, naming the peer', async () => {
    const cluster = await Cluster.start({
      modelDir,
      manifest,
      workDir: join(work.path, 'cluster'),
      hosts: 1,
      corruptAgents: [0],
    });
    try {
      const started = performance.now();
      await cluster.join(0);
      await cluster.waitComplete([0], started, WAIT_MS_MAX);
      const dest = join(work.path, 'dest');
      const { stdout, stderr } = await run(
        process.execPath,
        [
          CLI,
          'pull',
          cluster.originUrl,
          '--to',
          dest,
          '--manifest',
          manifestPath,
          '--scheduler',
          cluster.scheduler.url,
          '--json',
        ],
        { timeout: WAIT_MS_MAX },
      );
      const done = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as Record<string, unknown>;
      assert.equal(done['event'], 'done', stdout);
      assert.ok(await identicalToOrigin(dest, modelDir, manifest), 'the copy differs from the origin');
      const corrupt = Number(done['corruptPieces']);
      assert.ok(corrupt > 0, `the peer sent no piece, so this proves nothing: ${stdout}`);
      // One line per corrupt piece, each naming the peer that sent it.
      const lines = stderr.split('\n').filter((line) => line.includes('failed verification'));
      assert.equal(lines.length, corrupt, stderr);
      for (const line of lines) {
        assert.match(line, /^weightcast: piece \d+ \(.+ piece \d+\) from peer \S+ failed verification/);
        assert.ok(
          line.includes(`from peer ${cluster.agentUrl(0)} `),
          `${line} (peer ${cluster.agentUrl(0)})`,
        );
      }
    } finally {
      await cluster.close();
    }
  });
});
