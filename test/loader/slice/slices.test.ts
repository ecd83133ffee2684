/**
 * Slice-aware fetch end to end, from a local directory: for each architecture and tp 2, 4 and 8,
 * every rank's loaded tensors equal the reference slice of the full tensor cut in memory, in each of
 * the three formats and under each kind of verification; bytes fetched are counted exactly.
 */

import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadRank, type LoadRankOptions } from '../../../src/loader/slice/load-rank.js';
import type { SliceFormat } from '../../../src/loader/slice/outputs.js';
import type { Manifest } from '../../../src/manifest/manifest.js';
import { tempDir } from '../../helpers/fixtures.js';
import { loadAllTensors, referenceSlice, type LoadedTensor } from '../plan/helpers.js';
import { modelManifest, planManifestFor, readOutputTensors, writeArchModel, type Arch } from './helpers.js';

let work: { path: string; cleanup: () => Promise<void> };
before(async () => {
  work = await tempDir('slice');
});
after(async () => {
  await work.cleanup();
});

const FORMATS: SliceFormat[] = ['hf', 'shm', 'sharded-state'];
const ARCHES: Arch[] = ['llama', 'qwen2-moe', 'deepseek-v3'];

for (const arch of ARCHES) {
  describe(`slice-aware load of ${arch}`, () => {
    let dir: string;
    let manifest: Manifest;
    let full: Map<string, LoadedTensor>;
    before(async () => {
      dir = join(work.path, arch);
      await writeArchModel(dir, arch);
      manifest = await modelManifest(dir);
      full = (await loadAllTensors(dir)).tensors;
    });

    for (const tp of [2, 4, 8]) {
      it(`tp ${tp}: every rank's tensors equal the in-memory slices`, async () => {
        const planManifest = await planManifestFor(dir, { tp });
        for (let rank = 0; rank < tp; rank++) {
          // Cycle formats and verification so every combination is met across the ranks.
          const format = FORMATS[(rank + tp) % FORMATS.length] as SliceFormat;
          const mode = (['plan-manifest', 'pieces', 'none'] as const)[(rank + tp + 1) % 3];
          const to = join(work.path, 'out', `${arch}-tp${tp}-rank${rank}`);
          const options: LoadRankOptions = {
            tp,
            rank,
            to,
            format,
            memoryBytes: 4 * 1024 * 1024,
            hashThreads: 1,
            partBytesMax: 64 * 1024,
            ...(mode === 'plan-manifest' ? { planManifest } : {}),
            ...(mode === 'pieces' ? { manifest } : {}),
          };
          const result = await loadRank(dir, options);
          assert.equal(result.verification, mode);
          const written = await readOutputTensors(to);
          const planned = planManifest.ranks[rank]?.tensors ?? [];
          assert.equal(written.size, planned.length, `rank ${rank}: tensor count`);
          for (const entry of planned) {
            const source = full.get(entry.name);
            const got = written.get(entry.name);
            assert.ok(source && got, `rank ${rank}: ${entry.name} written`);
            assert.ok(
              got.bytes.equals(referenceSlice(source, entry.slice)),
              `${arch} tp ${tp} rank ${rank} (${format}, ${mode}): ${entry.name} differs`,
            );
            assert.equal(got.dtype, source.dtype);
          }
          const rankBytes = result.sliceBytes + result.replicatedBytes;
          if (mode === 'pieces') {
            assert.ok(result.bytesFetched >= rankBytes, 'pieces cover the slices');
            assert.ok(result.piecesVerified > 0);
          } else {
            // Exact ranges: exactly the slices' bytes, not one more.
            assert.equal(result.bytesFetched, rankBytes, `${mode}: bytes fetched`);
            assert.equal(result.fetchRatio, rankBytes === 0 ? null : 1);
          }
          if (mode === 'plan-manifest') assert.equal(result.slicesVerified, planned.length);
          // The config travels with every format, byte for byte.
          assert.deepEqual(await readFile(join(to, 'config.json')), await readFile(join(dir, 'config.json')));
          assert.ok(!(await readdir(to)).some((name) => name.endsWith('.weightcast-partial')));
        }
      });
    }
  });
}
