/**
 * End-to-end verification of a slice load: a slice whose bytes differ from its plan manifest digest
 * fails with PLAN_SLICE_HASH_MISMATCH and leaves nothing under a final name; a plan manifest for
 * another layout is refused; without one, the model manifest's pieces catch the same corruption.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, it } from 'node:test';
import { writePlanManifest } from '../../../src/loader/plan/files.js';
import type { PlanManifest } from '../../../src/loader/plan/plan-manifest.js';
import { loadRank } from '../../../src/loader/slice/load-rank.js';
import { writeManifest, type Manifest } from '../../../src/manifest/manifest.js';
import { CLI } from '../../../scripts/cluster.js';
import { tempDir } from '../../helpers/fixtures.js';
import { modelManifest, planManifestFor, writeArchModel } from './helpers.js';

let work: { path: string; cleanup: () => Promise<void> };
let dir: string;
let manifest: Manifest;
let planManifest: PlanManifest;

before(async () => {
  work = await tempDir('slice-verify');
  dir = join(work.path, 'model');
  await writeArchModel(dir, 'llama');
  manifest = await modelManifest(dir);
  planManifest = await planManifestFor(dir, { tp: 2 });
  // Flip one byte inside rank 1's slice of an o_proj (a dim-1 slice), after both manifests were made.
  const entry = planManifest.ranks[1]?.tensors.find((t) =>
    t.name.endsWith('layers.1.self_attn.o_proj.weight'),
  );
  assert.ok(entry?.slice?.dim === 1);
  const { loadAllTensors } = await import('../plan/helpers.js');
  const { files } = await loadAllTensors(dir);
  const file = files.get(entry.file) as Buffer;
  const { parseSafetensorsBuffer } = await import('../../../src/format/safetensors.js');
  const tensor = parseSafetensorsBuffer(file, entry.file).tensors.find((t) => t.name === entry.name);
  assert.ok(tensor);
  // Row 3, first column of rank 1's half: BF16, so 2 bytes per element.
  const offset = tensor.start + (3 * (entry.shape[1] ?? 0) + entry.slice.start) * 2;
  const handle = await open(join(dir, entry.file), 'r+');
  const byte = Buffer.alloc(1);
  await handle.read(byte, 0, 1, offset);
  byte[0] = (byte[0] ?? 0) ^ 0x5a;
  await handle.write(byte, 0, 1, offset);
  await handle.close();
});
after(async () => {
  await work.cleanup();
});

async function finalNames(path: string): Promise<string[]> {
  const names = await readdir(path).catch(() => [] as string[]);
  return names.filter((name) => !name.endsWith('.weightcast-partial'));
}

for (const format of ['hf', 'sharded-state'] as const) {
  it(`${format}: a corrupt slice fails its plan manifest digest and nothing is written`, async () => {
    const to = join(work.path, `out-${format}`);
    await assert.rejects(
      () =>
        loadRank(dir, { tp: 2, rank: 1, to, format, planManifest, hashThreads: 1, partBytesMax: 32 * 1024 }),
      (error: { code?: string; details?: { tensor?: string } }) =>
        error.code === 'PLAN_SLICE_HASH_MISMATCH' && error.details?.tensor?.includes('o_proj') === true,
    );
    assert.deepEqual(await finalNames(to), []);
    assert.deepEqual(await readdir(to).catch(() => []), [], 'partials removed too');
  });
}

it('rank 0 does not hold the corrupt bytes and loads', async () => {
  const result = await loadRank(dir, {
    tp: 2,
    rank: 0,
    to: join(work.path, 'rank0'),
    format: 'hf',
    planManifest,
  });
  assert.equal(result.slicesVerified, result.tensors);
});

it('a plan manifest for another layout is refused', async () => {
  const other = await planManifestFor(dir, { tp: 4 });
  await assert.rejects(
    () => loadRank(dir, { tp: 2, rank: 0, to: join(work.path, 'other'), format: 'hf', planManifest: other }),
    { code: 'PLAN_MANIFEST_INVALID' },
  );
});

it('without a plan manifest the model manifest pieces catch the corruption', async () => {
  await assert.rejects(
    () =>
      loadRank(dir, {
        tp: 2,
        rank: 1,
        to: join(work.path, 'pieces'),
        format: 'shm',
        manifest,
        hashThreads: 1,
        order: 'single',
      }),
    { code: 'PIECE_HASH_MISMATCH' },
  );
  assert.deepEqual(await finalNames(join(work.path, 'pieces')), []);
});

it('the CLI exits non-zero with the code in its JSON error', async () => {
  const planPath = join(work.path, 'plan.json');
  await writePlanManifest(planPath, planManifest);
  const manifestPath = join(work.path, 'manifest.json');
  await writeManifest(manifestPath, manifest);
  const to = join(work.path, 'cli');
  const run = promisify(execFile);
  const failed = await run(process.execPath, [
    CLI,
    'load',
    dir,
    '--tp',
    '2',
    '--rank',
    '1',
    '--format',
    'sharded-state',
    '--to',
    to,
    '--plan-manifest',
    planPath,
    '--json',
  ]).then(
    () => undefined,
    (error: { code?: number; stdout?: string; stderr?: string }) => error,
  );
  assert.ok(failed !== undefined && failed.code !== 0);
  assert.match(`${failed.stdout ?? ''}${failed.stderr ?? ''}`, /PLAN_SLICE_HASH_MISMATCH/);
  assert.deepEqual(await finalNames(to), []);
  const ok = await run(process.execPath, [
    CLI,
    'load',
    dir,
    '--tp',
    '2',
    '--rank',
    '0',
    '--format',
    'sharded-state',
    '--to',
    to,
    '--plan-manifest',
    planPath,
    '--manifest',
    manifestPath,
    '--json',
  ]);
  const summary = JSON.parse(ok.stdout.trim().split('\n').at(-1) ?? '{}') as Record<string, unknown>;
  assert.equal(summary['verification'], 'plan-manifest');
  assert.equal(
    summary['bytesFetched'],
    (summary['sliceBytes'] as number) + (summary['replicatedBytes'] as number),
  );
  assert.ok((await finalNames(to)).includes('model-rank-0-part-0.safetensors'));
});
