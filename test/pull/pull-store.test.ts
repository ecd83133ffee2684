/**
 * The pull on the piece store: what it keeps of the store's resume and identity, in process. A trusting
 * pull (no manifest) stopped part-way resumes from its journalled digests; a pull of another manifest
 * discards the old partial state and says so; a wrong file at a final name is replaced by the verified
 * one; a directory there is refused before anything is fetched.
 */

import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { isWeightcastError } from '../../src/errors.js';
import { buildManifest } from '../../src/manifest/build.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { startFileServer } from '../../src/origin/file-server.js';
import { HttpOrigin } from '../../src/origin/http.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { pull, type PullEvent } from '../../src/pull/pull.js';
import { pullFixture, sameFiles } from '../helpers/fixtures.js';

const PIECE = 64 * 1024;

function fixture(
  label: string,
): Promise<{ root: string; dest: string; manifest: Manifest; cleanup: () => Promise<void> }> {
  return pullFixture(label, PIECE, 1);
}

/** Pulls until `pieces` pieces are done, then aborts; resolves with the pieces done by then. */
async function pullPart(
  run: (options: { signal: AbortSignal; onEvent: (e: PullEvent) => void }) => Promise<unknown>,
  pieces: number,
): Promise<number> {
  const controller = new AbortController();
  let done = 0;
  const onEvent = (event: PullEvent): void => {
    if (event.type !== 'progress') return;
    done = event.piecesDone;
    if (done >= pieces) controller.abort();
  };
  await assert.rejects(run({ signal: controller.signal, onEvent }));
  return done;
}

test('a trusting pull stopped part-way resumes from the digests it journalled', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-trust-resume');
  const server = await startFileServer({ root });
  try {
    const origin = new HttpOrigin(server.url);
    const done = await pullPart((o) => pull(origin, dest, { pieceSize: PIECE, concurrency: 1, ...o }), 4);
    assert.ok(done >= 4);
    const events: PullEvent[] = [];
    const result = await pull(origin, dest, { pieceSize: PIECE, onEvent: (e) => events.push(e) });
    await origin.close();
    assert.equal(result.trust, true);
    assert.ok(result.piecesReused >= done, `${result.piecesReused} reused of ${done} done`);
    assert.equal(
      events.some((e) => e.type === 'state-discarded'),
      false,
    );
    const listed = result.manifest.files.map((f) => f.path);
    assert.ok(await sameFiles(root, dest, listed));
    for (const file of result.manifest.files) {
      const expected = manifest.files.find((f) => f.path === file.path);
      assert.deepEqual(file.pieces, expected?.pieces, file.path);
    }
  } finally {
    await server.close();
    await cleanup();
  }
});

test('a pull of another manifest discards the partial state of the first, and says so', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-discard');
  const origin = new LocalOrigin(root);
  try {
    const done = await pullPart((o) => pull(origin, dest, { manifest, concurrency: 1, ...o }), 3);
    const other = await buildManifest(origin, { pieceSize: PIECE * 2, threads: 1 });
    const events: PullEvent[] = [];
    const result = await pull(origin, dest, { manifest: other, onEvent: (e) => events.push(e) });
    assert.ok(events.some((e) => e.type === 'state-discarded'));
    // Only files already complete under their final names (they verify under the new manifest too).
    assert.ok(result.piecesReused < done, `${result.piecesReused} reused`);
    assert.ok(
      await sameFiles(
        root,
        dest,
        manifest.files.map((f) => f.path),
      ),
    );
  } finally {
    await origin.close();
    await cleanup();
  }
});

test('a wrong file at its final name is replaced by the verified one; a directory there is refused', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-replace');
  const origin = new LocalOrigin(root);
  try {
    const path = 'model-00001-of-00002.safetensors';
    const wrong = await readFile(join(root, path));
    wrong[wrong.length - 1] = (wrong[wrong.length - 1] ?? 0) ^ 1;
    await mkdir(dest, { recursive: true });
    await writeFile(join(dest, path), wrong);
    const events: PullEvent[] = [];
    await pull(origin, dest, { manifest, onEvent: (e) => events.push(e) });
    assert.ok(
      await sameFiles(
        root,
        dest,
        manifest.files.map((f) => f.path),
      ),
    );
    assert.ok(events.some((e) => e.type === 'file-complete' && e.path === path));
    const plan = events.findIndex((e) => e.type === 'plan');
    assert.ok(events.findIndex((e) => e.type === 'file-complete') > plan, 'files complete after the plan');

    const blocked = join(dest, '..', 'blocked');
    await mkdir(join(blocked, 'config.json'), { recursive: true });
    await assert.rejects(pull(origin, blocked, { manifest }), (error: unknown) =>
      isWeightcastError(error, 'PULL_DESTINATION_CONFLICT'),
    );
  } finally {
    await origin.close();
    await cleanup();
  }
});
