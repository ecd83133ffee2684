/**
 * A seed node's piece store keeps the piece layer's contract, shown on a real `agent --role seed`
 * process: wrong bytes for a piece are refused (SEED_VERIFY_FAILED, HTTP 422) and leave nothing
 * behind, whether the node held the piece or not; and a node killed with SIGKILL while puts are in
 * flight comes back on the same directory holding every piece it acknowledged, each `pieces/<n>`
 * hashing to its manifest digest, with nothing from `incoming/` counted.
 */

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Proc } from '../../../scripts/cluster.js';
import { isWeightcastError } from '../../../src/errors.js';
import { buildManifest } from '../../../src/manifest/build.js';
import { manifestDigest, type Manifest } from '../../../src/manifest/manifest.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { PieceMap } from '../../../src/piece/piece-map.js';
import { pieceDigest } from '../../../src/piece/verify.js';
import { SeedNodeClient } from '../../../src/seed/node/client.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';
import { Tier } from './tier.js';

const PIECE = 64 * 1024;
const EXIT_WAIT_MS = 5000;

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let map: PieceMap;
let hex: string;
let tier: Tier;

before(async () => {
  work = await tempDir('seed-store-contract');
  modelDir = join(work.path, 'origin');
  await synthesizeModel({
    dir: modelDir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: 2 << 20,
    shards: 2,
    seed: 5,
  });
  const local = new LocalOrigin(modelDir);
  manifest = await buildManifest(local, { pieceSize: PIECE }).finally(() => local.close());
  map = new PieceMap(manifest);
  hex = manifestDigest(manifest).slice('sha256:'.length);
  tier = await Tier.start(work.path);
  // A node takes only models the catalog has: the model is announced, as `put` does first.
  await tier.catalog.announceModel(manifest);
});

after(async () => {
  await tier?.close();
  await work.cleanup();
});

/** The piece's bytes as the origin has them. */
async function originPiece(piece: number): Promise<Buffer> {
  const where = map.locate(piece);
  const file = await readFile(join(modelDir, where.file.path));
  return file.subarray(where.offset, where.offset + where.length);
}

const modelDirOf = (node: string): string => join(work.path, node, 'seed', hex);
const piecePath = (node: string, piece: number): string => join(modelDirOf(node), 'pieces', String(piece));

async function exists(path: string): Promise<boolean> {
  return (await stat(path).catch(() => undefined)) !== undefined;
}

async function startNode(name: string): Promise<SeedNodeClient> {
  const proc = await tier.startNode(name);
  return new SeedNodeClient(name, proc.url);
}

/** Kills a node this test started, by its PID, and waits (bounded) until it is gone. */
async function killNode(proc: Proc): Promise<void> {
  const exited = once(proc.child, 'exit');
  proc.child.kill('SIGKILL');
  const gone = await Promise.race([exited.then(() => true), sleep(EXIT_WAIT_MS, false, { ref: false })]);
  assert.ok(gone, `the seed node (pid ${proc.child.pid}) did not exit within ${EXIT_WAIT_MS} ms`);
}

/** Whether `error` is SEED_VERIFY_FAILED as the client reports a 422 answer. */
function verifyFailed(error: unknown): boolean {
  assert.ok(isWeightcastError(error, 'SEED_VERIFY_FAILED'), String(error));
  assert.equal(error.details['status'], 422);
  return true;
}

describe('a seed node process and its piece store', { timeout: 60_000 }, () => {
  it('refuses wrong bytes for a piece with SEED_VERIFY_FAILED (422) and changes nothing it holds', async () => {
    const client = await startNode('refuse');
    await client.putManifest(manifest);
    const held = 1;
    const fresh = 2;
    assert.equal(await client.putPiece(hex, held, await originPiece(held)), 'stored');
    const before = await client.held(hex);
    assert.deepEqual(before, [held]);

    for (const piece of [fresh, held]) {
      const right = await originPiece(piece);
      const flipped = Buffer.from(right);
      flipped[100] = (flipped[100] ?? 0) ^ 0x01;
      const wrongs = { 'one byte flipped': flipped, 'one byte short': right.subarray(0, right.length - 1) };
      for (const [what, bytes] of Object.entries(wrongs)) {
        await assert.rejects(client.putPiece(hex, piece, bytes), verifyFailed, `piece ${piece}, ${what}`);
      }
    }
    // A fresh piece never appears; a held one keeps exactly its verified bytes.
    assert.equal(await exists(piecePath('refuse', fresh)), false, 'pieces/<n> of a refused put exists');
    assert.deepEqual(await readFile(piecePath('refuse', held)), await originPiece(held));
    assert.deepEqual(await client.held(hex), before);
    assert.deepEqual(await client.getPiece(hex, held, map.pieceLength(held)), await originPiece(held));
    assert.deepEqual(await readdir(join(modelDirOf('refuse'), 'incoming')), [], 'a refused put left a file');
    assert.deepEqual(await client.verifyPiece(hex, held), { ok: true, digest: map.locate(held).digest });
  });

  it('killed with SIGKILL mid-puts, restarted on its directory, holds every acknowledged piece', async () => {
    const name = 'killed';
    const first = await startNode(name);
    await first.putManifest(manifest);
    const acknowledged = new Set<number>();
    const killAfter = 6;
    const pieces = Array.from({ length: map.pieceCount }, (_, piece) => piece);
    assert.ok(pieces.length > 2 * killAfter, `${pieces.length} pieces`);
    let next = 0;
    let killing: Promise<void> | undefined;
    // Four puts in flight at a time; the node is killed right after the sixth answer, with others
    // still on the wire or being written.
    const stream = async (): Promise<void> => {
      while (killing === undefined && next < pieces.length) {
        const piece = next++;
        const bytes = await originPiece(piece);
        const result = await first.putPiece(hex, piece, bytes).catch(() => undefined);
        if (result === undefined) return;
        assert.equal(result, 'stored');
        acknowledged.add(piece);
        if (acknowledged.size === killAfter) killing = killNode(tier.nodes.get(name) as Proc);
      }
    };
    await Promise.all(Array.from({ length: 4 }, stream));
    await killing;
    assert.ok(acknowledged.size >= killAfter, `${acknowledged.size} puts acknowledged before the kill`);
    assert.ok(acknowledged.size < pieces.length, 'the node was killed before every put was answered');

    // What a put cut short leaves in incoming/: a torn file, and a whole one not yet renamed. The
    // kill may or may not land inside a put, so both are made here too.
    const incoming = join(modelDirOf(name), 'incoming');
    const leftovers = await readdir(incoming);
    // Two pieces no put was sent for.
    const unsent = pieces.slice(next);
    assert.ok(unsent.length >= 2, `puts were sent for ${next} of ${pieces.length} pieces`);
    const [torn, whole] = unsent as [number, number];
    await writeFile(join(incoming, `${torn}.0badf00d`), (await originPiece(torn)).subarray(0, 100));
    await writeFile(join(incoming, `${whole}.0badf00d`), await originPiece(whole));

    const again = await startNode(name);
    const held = await again.held(hex);
    for (const piece of acknowledged) assert.ok(held.includes(piece), `acknowledged piece ${piece} is lost`);
    assert.ok(
      !held.includes(torn) && !held.includes(whole),
      `a leftover of incoming/ counts: ${held.join(' ')}`,
    );
    assert.deepEqual(
      await readdir(incoming),
      [],
      `incoming/ after the restart (the kill left: ${leftovers.join(', ') || 'nothing'})`,
    );
    // Every piece the node counts is a file under pieces/ that hashes to its manifest digest, and
    // no file there is left uncounted.
    const files = (await readdir(join(modelDirOf(name), 'pieces'))).map(Number).sort((a, b) => a - b);
    assert.deepEqual(files, held);
    for (const piece of held) {
      const bytes = await readFile(piecePath(name, piece));
      assert.equal(pieceDigest(bytes), map.locate(piece).digest, `pieces/${piece} differs`);
      assert.equal(bytes.length, map.pieceLength(piece));
    }
    // The rest goes in; what it held is a duplicate, not written again.
    for (const piece of pieces) {
      const result = await again.putPiece(hex, piece, await originPiece(piece));
      assert.equal(result, held.includes(piece) ? 'duplicate' : 'stored', `piece ${piece}`);
    }
    assert.deepEqual(await again.held(hex), pieces);
  });
});
