import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import type { Manifest } from '../../src/manifest/manifest.js';
import { merkleRoot } from '../../src/manifest/merkle.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import {
  TRANSFER_UNIT_BYTES_DEFAULT,
  TransferUnits,
  UNITS_MIN,
  unitPiecesFor,
} from '../../src/swarm/scheduler/transfer-units.js';
import { ASSIGNMENT_BYTES_MAX } from '../../src/swarm/wire/limits.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** A manifest of files of the given sizes, cut into `pieceSize` pieces (made-up digests). */
function manifestOf(pieceSize: number, sizes: readonly number[]): Manifest {
  return {
    pieceSize,
    files: sizes.map((size, index) => {
      const digests = Array.from({ length: Math.ceil(size / pieceSize) }, (_, i) =>
        createHash('sha256').update(`${index}/${i}`).digest('hex'),
      );
      return { path: `f${index}.bin`, size, merkleRoot: merkleRoot(digests), pieces: digests };
    }),
  };
}

describe('transfer units', () => {
  it('aims at 1 MiB per transfer while a model keeps 1024 units, and never below one piece', () => {
    // 256 MiB in 512 KiB pieces (519): grouping would leave 259 units, so pieces move alone.
    assert.equal(unitPiecesFor(512 * KiB, 519, TRANSFER_UNIT_BYTES_DEFAULT), 1);
    // 256 MiB in 128 KiB pieces (2048): pairs, not the 8 that would make 1 MiB.
    assert.equal(unitPiecesFor(128 * KiB, 2048, TRANSFER_UNIT_BYTES_DEFAULT), 2);
    // Pieces of 1 MiB or more, and small models, move one piece at a time.
    assert.equal(unitPiecesFor(MiB, 100_000, TRANSFER_UNIT_BYTES_DEFAULT), 1);
    assert.equal(unitPiecesFor(16 * MiB, 1024, TRANSFER_UNIT_BYTES_DEFAULT), 1);
    assert.equal(unitPiecesFor(64 * KiB, UNITS_MIN * 2 - 1, TRANSFER_UNIT_BYTES_DEFAULT), 1);
    assert.equal(unitPiecesFor(64 * KiB, 100_000, TRANSFER_UNIT_BYTES_DEFAULT), 16);
  });

  it("keeps every unit inside one file and sums its pieces' lengths", () => {
    // Files of 5, 1 and 3.5 pieces: units of 2 are [0,1] [2,3] [4] | [5] | [6,7] [8,9].
    const map = new PieceMap(manifestOf(100, [500, 100, 350]));
    const units = new TransferUnits(map, 2);
    assert.equal(map.pieceCount, 10);
    assert.equal(units.count, 6);
    const layout = Array.from({ length: units.count }, (_, u) => [units.firstPiece(u), units.pieces(u)]);
    assert.deepEqual(layout, [
      [0, 2],
      [2, 2],
      [4, 1],
      [5, 1],
      [6, 2],
      [8, 2],
    ]);
    assert.deepEqual(
      Array.from({ length: units.count }, (_, u) => units.length(u)),
      [200, 200, 100, 100, 200, 150],
    );
    assert.equal(units.unitBytes, 200);
    assert.deepEqual(
      Array.from({ length: map.pieceCount }, (_, p) => units.unitOf(p)),
      [0, 0, 1, 1, 2, 3, 4, 4, 5, 5],
    );
  });

  it('counts a unit held only when every piece of it is', () => {
    const units = new TransferUnits(new PieceMap(manifestOf(100, [500, 100, 350])), 2);
    assert.deepEqual(units.unitsHeld([0, 3, 4, 5, 9, 8, 1]).sort(), [0, 2, 3, 5]);
    assert.deepEqual(units.unitsHeld([]), []);
  });

  it('with one piece per unit, is the piece map itself', () => {
    const map = new PieceMap(manifestOf(100, [500, 100, 350]));
    const units = new TransferUnits(map, 1);
    assert.equal(units.count, map.pieceCount);
    for (let p = 0; p < map.pieceCount; p++) {
      assert.equal(units.firstPiece(p), p);
      assert.equal(units.length(p), map.pieceLength(p));
    }
  });

  it('keeps a unit within what one peer request may carry', () => {
    const units = new TransferUnits(new PieceMap(manifestOf(MiB, [64 * MiB])), 64);
    assert.equal(units.unitPieces, ASSIGNMENT_BYTES_MAX / MiB);
    // Pieces larger than that move alone.
    assert.equal(new TransferUnits(new PieceMap(manifestOf(8 * MiB, [64 * MiB])), 4).unitPieces, 1);
  });
});
