import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { digestMatches, pieceDigest, verifyPiece } from '../../src/piece/verify.js';

test('verifyPiece takes exactly the bytes the manifest names: length and SHA-256', () => {
  const bytes = Buffer.from('the bytes of one piece');
  const digest = createHash('sha256').update(bytes).digest('hex');
  assert.equal(pieceDigest(bytes), digest);
  assert.equal(verifyPiece(bytes, { length: bytes.length, digest }), true);
  const flipped = Buffer.from(bytes);
  flipped[3] = (flipped[3] ?? 0) ^ 1;
  assert.equal(verifyPiece(flipped, { length: bytes.length, digest }), false);
  assert.equal(verifyPiece(bytes.subarray(1), { length: bytes.length, digest }), false);
  assert.equal(verifyPiece(bytes, { length: bytes.length + 1, digest }), false);
  assert.equal(verifyPiece(new Uint8Array(0), { length: 0, digest: pieceDigest(new Uint8Array(0)) }), true);
});

test("digestMatches takes a digest computed elsewhere only with the manifest's length and digest", () => {
  const bytes = Buffer.from('a piece hashed on a worker thread');
  const digest = pieceDigest(bytes);
  assert.equal(digestMatches(bytes.length, digest, { length: bytes.length, digest }), true);
  assert.equal(digestMatches(bytes.length - 1, digest, { length: bytes.length, digest }), false);
  assert.equal(
    digestMatches(bytes.length, pieceDigest(bytes.subarray(1)), { length: bytes.length, digest }),
    false,
  );
  assert.equal(digestMatches(bytes.length, digest.toUpperCase(), { length: bytes.length, digest }), false);
});
