/**
 * Lazy loading through an agent while the swarm is still filling: a real origin (rate-capped),
 * scheduler and agent as processes on loopback. The loader asks for the rank's first layer before
 * anything else, the agent's local reads move those pieces to the front, so the first layer is in
 * while the agent still holds well under half of the model. A behavioural check (how much the
 * agent holds at that moment), not a race on wall-clock times.
 */

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { loadRank, type SliceLoadEvent } from '../../../src/loader/slice/load-rank.js';
import type { Manifest } from '../../../src/manifest/manifest.js';
import { Cluster, type AgentStatus } from '../../../scripts/cluster.js';
import { tempDir } from '../../helpers/fixtures.js';
import { llamaLike, loadAllTensors, referenceSlice, writeTinyModel } from '../plan/helpers.js';
import { modelManifest, planManifestFor, readOutputTensors } from './helpers.js';

let work: { path: string; cleanup: () => Promise<void> };
let dir: string;
let manifest: Manifest;

before(async () => {
  work = await tempDir('slice-lazy');
  dir = join(work.path, 'origin');
  // 16 layers of about 0.5 MiB: the first layer and the embedding are about an eighth of the model.
  const model = llamaLike({
    modelType: 'llama',
    layers: 16,
    hidden: 128,
    heads: 8,
    kvHeads: 2,
    headDim: 16,
    intermediate: 512,
    vocab: 2048,
  });
  await writeTinyModel(dir, model, 'lazy');
  manifest = await modelManifest(dir);
});
after(async () => {
  await work.cleanup();
});

it(
  'the first layer arrives through a filling agent long before the whole model',
  { timeout: 60_000 },
  async (t) => {
    const cluster = await Cluster.start({
      modelDir: dir,
      manifest,
      workDir: join(work.path, 'cluster'),
      hosts: 1,
      originMbps: 16,
    });
    try {
      let atFirstLayer: AgentStatus | undefined;
      const to = join(work.path, 'rank0');
      const result = await loadRank(cluster.originUrl, {
        tp: 2,
        rank: 0,
        to,
        format: 'shm',
        manifest,
        agentUrl: cluster.agentUrl(0),
        hashThreads: 1,
        memoryBytes: 4 * 1024 * 1024,
        onEvent: async (event: SliceLoadEvent) => {
          if (event.type === 'first-layer') atFirstLayer = await cluster.status(0);
        },
      });
      assert.ok(atFirstLayer !== undefined, 'the first layer was reported');
      const heldShare = atFirstLayer.held / atFirstLayer.pieceCount;
      t.diagnostic(
        `first layer after ${result.firstLayerSeconds?.toFixed(2)} s with ${atFirstLayer.held} of ${atFirstLayer.pieceCount} pieces held; rank in ${result.seconds.toFixed(2)} s`,
      );
      assert.ok(
        heldShare < 0.5,
        `the agent held ${(heldShare * 100).toFixed(0)}% of the pieces at the first layer`,
      );
      assert.ok(result.firstLayerSeconds !== null && result.firstLayerSeconds < result.seconds);
      assert.equal(result.verification, 'pieces');
      // What was loaded is right.
      const full = (await loadAllTensors(dir)).tensors;
      const written = await readOutputTensors(to);
      const planned = (await planManifestFor(dir, { tp: 2 })).ranks[0]?.tensors ?? [];
      assert.equal(written.size, planned.length);
      for (const entry of planned) {
        const source = full.get(entry.name);
        assert.ok(source);
        assert.ok(written.get(entry.name)?.bytes.equals(referenceSlice(source, entry.slice)), entry.name);
      }
    } finally {
      await cluster.close();
    }
  },
);
