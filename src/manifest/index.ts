/**
 * `weightcast/manifest`: a model's manifest (files, pieces with their SHA-256, a Merkle root per file,
 * the tensor index), its canonical encoding and digest (the model's name, `sha256:<hex>`), building
 * one from any origin, and checking a directory against one.
 */

export {
  FILES_MAX,
  MANIFEST_BYTES_MAX,
  MODEL_BYTES_MAX,
  PIECE_SIZE_DEFAULT,
  PIECE_SIZE_MAX,
  PIECE_SIZE_MIN,
  defaultPieceSize,
  encodeManifest,
  loadManifest,
  manifestDigest,
  parseManifest,
  pieceCount,
  pieceRange,
  totalBytes,
  totalPieces,
  writeManifest,
  type LoadManifestOptions,
  type Manifest,
  type ManifestFile,
  type ManifestTensor,
} from './manifest.js';
export { merkleProof, merkleRoot, verifyMerkleProof, type ProofStep } from './merkle.js';
export { buildManifest, type BuildManifestOptions } from './build.js';
export {
  verifyDirectory,
  type FileReport,
  type FileVerdict,
  type VerifyOptions,
  type VerifyReport,
} from './verify.js';
export { HashPool } from './hash-pool.js';
