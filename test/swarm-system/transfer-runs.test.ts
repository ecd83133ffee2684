/**
 * What an agent fetches for an assignment of several pieces (a transfer unit): the pieces it lacks,
 * as runs of consecutive pieces, so that a piece verified before a restart is never fetched again;
 * and only assignments whose pieces lie in one file.
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import type { Manifest } from '../../src/manifest/manifest.js';
import { merkleRoot } from '../../src/manifest/merkle.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { missingRuns, withinOneFile } from '../../src/swarm/agent/member.js';

function holding(...pieces: number[]): { has: (piece: number) => boolean } {
  const set = new Set(pieces);
  return { has: (piece) => set.has(piece) };
}

describe('an assignment of several pieces', () => {
  it('fetches the missing pieces as runs, skipping every piece already held', () => {
    assert.deepEqual(missingRuns(4, 3, holding()), [[4, 3]]);
    assert.deepEqual(missingRuns(4, 3, holding(5)), [
      [4, 1],
      [6, 1],
    ]);
    assert.deepEqual(missingRuns(4, 4, holding(4, 7)), [[5, 2]]);
    assert.deepEqual(missingRuns(4, 3, holding(4, 5, 6)), []);
    assert.deepEqual(missingRuns(9, 1, holding()), [[9, 1]]);
  });

  it('is refused when its pieces run past their file or the model', () => {
    const digests = (file: number, n: number): string[] =>
      Array.from({ length: n }, (_, i) => createHash('sha256').update(`${file}/${i}`).digest('hex'));
    const manifest: Manifest = {
      pieceSize: 100,
      files: [
        { path: 'a', size: 300, merkleRoot: merkleRoot(digests(0, 3)), pieces: digests(0, 3) },
        { path: 'b', size: 150, merkleRoot: merkleRoot(digests(1, 2)), pieces: digests(1, 2) },
      ],
    };
    const map = new PieceMap(manifest);
    assert.equal(withinOneFile(map, 0, 3), true);
    assert.equal(withinOneFile(map, 1, 3), false, 'runs from a into b');
    assert.equal(withinOneFile(map, 3, 2), true);
    assert.equal(withinOneFile(map, 4, 2), false, 'past the last piece');
    assert.equal(withinOneFile(map, 5, 1), false);
    assert.equal(withinOneFile(map, 2, 0), false);
  });
});
