/**
 * The one checkpoint every piece passes before anything uses it: its length and its SHA-256 must be
 * the manifest's. Every store and reader that checks a piece in this process calls `verifyPiece`
 * (the agent's and the pull's stores, seed nodes, `put`, the re-layout's read-back, the
 * pre-sharder); a digest a hash worker thread computed is compared here too, with `digestMatches`.
 */

import { createHash } from 'node:crypto';

/**
 * Fetches of a piece whose bytes failed verification before the origin is given up on (so it sent
 * wrong bytes up to this + 1 times): a pull's default, and what a swarm member allows the origin too.
 */
export const PIECE_RETRIES_DEFAULT = 3;

/** What the manifest says of one piece. */
export interface ExpectedPiece {
  length: number;
  /** Lower-case hex SHA-256. */
  digest: string;
}

/** The lower-case hex SHA-256 of `bytes`. */
export function pieceDigest(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Whether `bytes` are exactly the piece the manifest describes. */
export function verifyPiece(bytes: Uint8Array, expected: ExpectedPiece): boolean {
  return digestMatches(bytes.length, pieceDigest(bytes), expected);
}

/** Whether `length` bytes whose SHA-256 is `digest` (computed elsewhere, e.g. on a hash worker) are the piece. */
export function digestMatches(length: number, digest: string, expected: ExpectedPiece): boolean {
  return length === expected.length && digest === expected.digest;
}
