/**
 * A binary Merkle tree over a file's piece digests, so one piece can be proven to belong to a file
 * whose root is known without the other pieces. Leaves and inner nodes are domain-separated
 * (RFC 6962 style) so that a leaf can never be passed off as an inner node:
 *   leaf  = SHA-256(0x00 || pieceDigest)
 *   inner = SHA-256(0x01 || left || right)
 * A level with an odd count promotes its last node unchanged. A file with no pieces has the root
 * SHA-256 of the empty string. Pure: no I/O.
 */

import { createHash } from 'node:crypto';

export type Digest = Buffer;

export interface ProofStep {
  /** Which side the sibling sits on. */
  side: 'left' | 'right';
  hash: string;
}

const LEAF_TAG = Buffer.from([0x00]);
const INNER_TAG = Buffer.from([0x01]);

function leafHash(pieceDigest: Digest): Digest {
  return createHash('sha256').update(LEAF_TAG).update(pieceDigest).digest();
}

function innerHash(left: Digest, right: Digest): Digest {
  return createHash('sha256').update(INNER_TAG).update(left).update(right).digest();
}

function nextLevel(level: Digest[]): Digest[] {
  const next: Digest[] = [];
  for (let i = 0; i < level.length; i += 2) {
    const left = level[i] as Digest;
    const right = level[i + 1];
    next.push(right === undefined ? left : innerHash(left, right));
  }
  return next;
}

function toBuffers(pieceDigestsHex: readonly string[]): Digest[] {
  return pieceDigestsHex.map((hex) => Buffer.from(hex, 'hex'));
}

export function merkleRoot(pieceDigestsHex: readonly string[]): string {
  if (pieceDigestsHex.length === 0) return createHash('sha256').digest('hex');
  let level = toBuffers(pieceDigestsHex).map(leafHash);
  while (level.length > 1) level = nextLevel(level);
  return (level[0] as Digest).toString('hex');
}

/** The sibling path from piece `index` up to the root. */
export function merkleProof(pieceDigestsHex: readonly string[], index: number): ProofStep[] {
  if (!Number.isInteger(index) || index < 0 || index >= pieceDigestsHex.length) {
    throw new RangeError(`piece ${index} is outside 0..${pieceDigestsHex.length - 1}`);
  }
  const proof: ProofStep[] = [];
  let level = toBuffers(pieceDigestsHex).map(leafHash);
  let position = index;
  while (level.length > 1) {
    const siblingIndex = position % 2 === 0 ? position + 1 : position - 1;
    const sibling = level[siblingIndex];
    if (sibling !== undefined) {
      proof.push({ side: position % 2 === 0 ? 'right' : 'left', hash: sibling.toString('hex') });
    }
    level = nextLevel(level);
    position = Math.floor(position / 2);
  }
  return proof;
}

/** True when `pieceDigestHex` with `proof` hashes up to `rootHex`. */
export function verifyMerkleProof(
  pieceDigestHex: string,
  proof: readonly ProofStep[],
  rootHex: string,
): boolean {
  let node = leafHash(Buffer.from(pieceDigestHex, 'hex'));
  for (const step of proof) {
    const sibling = Buffer.from(step.hash, 'hex');
    node = step.side === 'left' ? innerHash(sibling, node) : innerHash(node, sibling);
  }
  return node.toString('hex') === rootHex;
}
