import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { merkleProof, merkleRoot, merkleRootSteps, verifyMerkleProof } from '../../src/manifest/merkle.js';

const digest = (text: string): string => createHash('sha256').update(text).digest('hex');
const pieces = (count: number): string[] => Array.from({ length: count }, (_, i) => digest(`piece ${i}`));

test('every piece proves against its root, for tree sizes 1 to 33', () => {
  for (let count = 1; count <= 33; count++) {
    const leaves = pieces(count);
    const root = merkleRoot(leaves);
    for (let i = 0; i < count; i++) {
      assert.ok(
        verifyMerkleProof(leaves[i] as string, merkleProof(leaves, i), root),
        `count ${count} piece ${i}`,
      );
    }
  }
});

test('a wrong piece, a proof for another index, or another root does not verify', () => {
  const leaves = pieces(13);
  const root = merkleRoot(leaves);
  const proof = merkleProof(leaves, 5);
  assert.equal(verifyMerkleProof(digest('forged'), proof, root), false);
  assert.equal(verifyMerkleProof(leaves[5] as string, merkleProof(leaves, 6), root), false);
  assert.equal(verifyMerkleProof(leaves[5] as string, proof, merkleRoot(pieces(14))), false);
});

test('roots depend on order and on every leaf; an empty file has the empty-string digest', () => {
  const leaves = pieces(4);
  assert.notEqual(merkleRoot(leaves), merkleRoot([...leaves].reverse()));
  assert.notEqual(merkleRoot(leaves), merkleRoot(leaves.slice(0, 3)));
  assert.equal(merkleRoot([]), digest(''));
});

test('a leaf cannot pose as an inner node (domain separation)', () => {
  const leaves = pieces(2);
  const root = merkleRoot(leaves);
  // With a single-leaf tree whose "piece digest" is the root, the result must differ.
  assert.notEqual(merkleRoot([root]), root);
});

/** The tree as the module's comment defines it, written out with one hasher per node: the reference. */
function referenceRoot(leavesHex: readonly string[]): string {
  if (leavesHex.length === 0) return digest('');
  let level: Buffer[] = leavesHex.map((hex) =>
    createHash('sha256')
      .update(Buffer.from([0x00]))
      .update(Buffer.from(hex, 'hex'))
      .digest(),
  );
  while (level.length > 1) {
    const next: Buffer[] = [];
    for (let i = 0; i < level.length; i += 2) {
      const [left, right] = [level[i] as Buffer, level[i + 1]];
      next.push(
        right === undefined
          ? left
          : createHash('sha256')
              .update(Buffer.from([0x01]))
              .update(left)
              .update(right)
              .digest(),
      );
    }
    level = next;
  }
  return (level[0] as Buffer).toString('hex');
}

test('roots are the defined tree: the same as hashing each node on its own, any size, any digest length', () => {
  for (const count of [1, 2, 3, 5, 8, 13, 64, 65, 519]) {
    assert.equal(merkleRoot(pieces(count)), referenceRoot(pieces(count)), `count ${count}`);
  }
  // Manifests carry 32-byte digests; anything else is hashed as given, not padded or cut.
  const odd = ['abcd', digest('x'), `${digest('y')}00`];
  assert.equal(merkleRoot(odd), referenceRoot(odd));
  const leaves = pieces(6);
  const proof = merkleProof(leaves, 2).map((step, i) =>
    i === 0 ? { ...step, hash: step.hash.slice(0, 10) } : step,
  );
  assert.equal(verifyMerkleProof(leaves[2] as string, proof, merkleRoot(leaves)), false);
});

test('the root in steps: one pause per so many hashes, then the same root', () => {
  for (const count of [0, 1, 7, 64, 519]) {
    const steps = merkleRootSteps(pieces(count), 16);
    let pauses = 0;
    let step = steps.next();
    while (step.done !== true) {
      pauses++;
      step = steps.next();
    }
    assert.equal(step.value, merkleRoot(pieces(count)), `count ${count}`);
    // count leaves and count - 1 inner nodes (a level's odd last node is promoted, not hashed).
    const hashes = count === 0 ? 0 : 2 * count - 1;
    assert.equal(pauses, Math.floor(hashes / 16), `count ${count}`);
  }
});
