/**
 * The seed tier as processes on loopback: a scheduler with a catalog and seed agents. One model is
 * put on two nodes, pulled back full-mesh, then re-laid out again and again: under a concurrent
 * catalog update, with a reader holding the old map, killed at every journal step, and with a target
 * that stores wrong bytes. After each, nothing is lost, nothing is left over, and every file's SHA-256
 * equals the origin's.
 */

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildManifest } from '../../../src/manifest/build.js';
import { manifestDigest, writeManifest, type Manifest } from '../../../src/manifest/manifest.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { pull } from '../../../src/pull/pull.js';
import { applyDistribute, CRASH_STEPS } from '../../../src/seed/apply/apply.js';
import { planDistribute } from '../../../src/seed/plan/index.js';
import { SeedOrigin } from '../../../src/seed/read/seed-origin.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { sameFiles, tempDir } from '../../helpers/fixtures.js';
import { Tier, runCli } from './tier.js';

const PIECE = 64 * 1024;
let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifestPath: string;
let manifest: Manifest;
let hex: string;
let tier: Tier;

before(async () => {
  work = await tempDir('seed-tier');
  modelDir = join(work.path, 'origin');
  await synthesizeModel({
    dir: modelDir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: 1024 * 1024,
    shards: 2,
    seed: 7,
  });
  const local = new LocalOrigin(modelDir);
  manifest = await buildManifest(local, { pieceSize: PIECE }).finally(() => local.close());
  manifestPath = join(work.path, 'manifest.json');
  await writeManifest(manifestPath, manifest);
  hex = manifestDigest(manifest).slice('sha256:'.length);
  tier = await Tier.start(work.path);
  await Promise.all([tier.startNode('seed-a'), tier.startNode('seed-b')]);
});

after(async () => {
  await tier?.close();
  await work.cleanup();
});

const state = (): string => join(work.path, 'state');
const paths = (): string[] => manifest.files.map((file) => file.path);

function distributeArgs(mode: string, extra: readonly string[] = []): string[] {
  return [
    'distribute',
    `sha256:${hex}`,
    '--scheduler',
    tier.url,
    '--mode',
    mode,
    '--state',
    state(),
    ...extra,
  ];
}

describe('seed tier on loopback', { timeout: 120_000 }, () => {
  it('put places pieces by policy and a full-mesh pull is byte-identical', async () => {
    const put = await runCli([
      'put',
      modelDir,
      '--scheduler',
      tier.url,
      '--manifest',
      manifestPath,
      '--json',
    ]);
    assert.equal(put.code, 0, put.stderr + put.stdout);
    const snapshot = await tier.assertConsistent(hex);
    // Round-robin from the start: consecutive pieces on different nodes.
    snapshot.pieces.forEach((piece) =>
      assert.equal(piece.holders[0], piece.index % 2 === 0 ? 'seed-a' : 'seed-b'),
    );
    const again = await runCli(['put', modelDir, '--scheduler', tier.url, '--manifest', manifestPath]);
    assert.equal(again.code, 0);
    assert.match(again.stdout, /already in the seed tier/);

    const to = join(work.path, 'pulled');
    const pulled = await runCli([
      'pull',
      `sha256:${hex}`,
      '--seeds',
      tier.url,
      '--to',
      to,
      '--concurrency',
      '4',
    ]);
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.ok(await sameFiles(modelDir, to, paths()), 'the pull differs from the origin');
    await Promise.all([tier.startNode('seed-c'), tier.startNode('seed-d')]);
  });

  it('a dry run prints the same plan every time and changes nothing', async () => {
    const first = await runCli(distributeArgs('round-robin', ['--json']));
    const second = await runCli(distributeArgs('round-robin', ['--json']));
    assert.equal(first.code, 0, first.stderr);
    assert.equal(first.stdout, second.stdout);
    const plan = JSON.parse(first.stdout) as { moves: unknown[]; targetNodes: string[] };
    assert.ok(plan.moves.length > 0);
    assert.equal(plan.targetNodes.length, 4);
    assert.equal(
      (await tier.snapshot(hex)).pieces.every((piece) => piece.version === 1),
      true,
    );
  });

  it('a concurrent catalog update makes the move skip and replan, never commit blindly', async () => {
    let interfered = 0;
    const outcomes: string[] = [];
    const result = await applyDistribute({
      schedulerUrl: tier.url,
      model: hex,
      mode: 'round-robin',
      stateDir: state(),
      graceMs: 100,
      movesMax: 4,
      nodeMovesMax: 2,
      onEvent: (event) => {
        if (event.type === 'move' && event.outcome !== 'committed') outcomes.push(event.outcome);
      },
      beforeCommit: async (move) => {
        if (interfered > 0 || move.kind === 'promote') return;
        interfered++;
        // Someone else updates the entry first (same holders, a new version).
        const entry = (await tier.snapshot(hex)).pieces[move.piece]!;
        await tier.catalog.commit(hex, [
          { piece: move.piece, expectVersion: entry.version, holders: entry.holders },
        ]);
      },
    });
    assert.equal(result.conflicts, 1);
    assert.deepEqual(outcomes, ['conflict'], 'only the interfered move did not commit');
    assert.ok(result.passes >= 2, 'the conflicting piece was planned again');
    const snapshot = await tier.assertConsistent(hex);
    const replan = planDistribute(
      { model: hex, nodes: snapshot.nodes, pieces: snapshot.pieces },
      { mode: 'round-robin' },
    );
    assert.equal(replan.moves.length, 0, 'the layout converged');
    await tier.assertFilesEqual(hex, manifest, modelDir);
  });

  it('a reader holding the old map never fails during an apply (grace period)', async () => {
    const origin = await SeedOrigin.open(hex, { schedulerUrl: tier.url, manifest, mapRefreshesMax: 0 });
    try {
      const apply = runCli(
        distributeArgs('round-robin', ['--nodes', '2', '--apply', '--json', '--grace-ms', '4000']),
      );
      // Wait until the apply has committed moves, so the reader's map is stale.
      for (let round = 0; round < 200; round++) {
        const snapshot = await tier.snapshot(hex);
        if (snapshot.pieces.filter((piece) => piece.version > 1).length >= 8) break;
        await sleep(25);
      }
      const to = join(work.path, 'during');
      await pull(origin, to, { manifest, concurrency: 4 });
      assert.ok(await sameFiles(modelDir, to, paths()));
      assert.equal(origin.stats.mapRefreshes, 0, 'every old copy was still there');
      const done = await apply;
      assert.equal(done.code, 0, done.stderr + done.stdout);
      assert.match(done.stdout, /"result":"match"/);
      assert.doesNotMatch(done.stdout, /MISMATCH/);
    } finally {
      await origin.close();
    }
    const snapshot = await tier.assertConsistent(hex);
    assert.deepEqual([...new Set(snapshot.pieces.map((piece) => piece.holders[0]))].sort(), [
      'seed-a',
      'seed-b',
    ]);
  });

  it('killed at every journal step, a rerun converges with nothing lost', async () => {
    let nodes = 2;
    for (const step of CRASH_STEPS) {
      nodes = nodes === 2 ? 4 : 2;
      const crashed = await runCli(
        distributeArgs('round-robin', [
          '--nodes',
          String(nodes),
          '--apply',
          '--grace-ms',
          '50',
          '--no-file-hashes',
          '--crash-after',
          `${step}:2`,
        ]),
      );
      assert.equal(crashed.signal, 'SIGKILL', `the apply was to be killed at ${step}: ${crashed.stderr}`);
      const rerun = await runCli(
        distributeArgs('round-robin', [
          '--nodes',
          String(nodes),
          '--apply',
          '--grace-ms',
          '50',
          '--no-file-hashes',
        ]),
      );
      assert.equal(rerun.code, 0, `${step}: ${rerun.stderr}`);
      assert.match(rerun.stderr, /interrupted apply was found/);
      const snapshot = await tier.assertConsistent(hex);
      const replan = planDistribute(
        { model: hex, nodes: snapshot.nodes, pieces: snapshot.pieces },
        { mode: 'round-robin', nodes },
      );
      assert.equal(replan.moves.length, 0, `after a crash at ${step} the rerun converged`);
      await tier.assertFilesEqual(hex, manifest, modelDir);
    }
    // A finished plan run again does nothing.
    const idle = await runCli(
      distributeArgs('round-robin', [
        '--nodes',
        String(nodes),
        '--apply',
        '--grace-ms',
        '50',
        '--no-file-hashes',
        '--json',
      ]),
    );
    assert.equal(idle.code, 0);
    assert.match(idle.stdout, /"committed":0/);
  });

  it('a target that stores wrong bytes fails verification and nothing is committed to it', async () => {
    await tier.startNode('seed-e', ['--inject-seed-corrupt-stores']);
    const before = await tier.snapshot(hex);
    const result = await runCli(distributeArgs('round-robin', ['--apply', '--grace-ms', '50', '--json']));
    assert.equal(result.code, 1, result.stdout);
    assert.match(result.stdout, /"outcome":"verify-failed"/);
    assert.match(result.stdout, /SEED_APPLY_FAILED/);
    const after = await tier.assertConsistent(hex);
    assert.ok(
      after.pieces.every((piece) => !piece.holders.includes('seed-e')),
      'no entry names the bad node',
    );
    assert.ok(after.pieces.length === before.pieces.length);
    await tier.assertFilesEqual(hex, manifest, modelDir);
    await tier.stopNode('seed-e');
  });
});
