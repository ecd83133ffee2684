import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { isWeightcastError, type ErrorCode } from '../../src/errors.js';
import { encodeManifest, manifestDigest, parseManifest, type Manifest } from '../../src/manifest/manifest.js';
import { merkleRoot } from '../../src/manifest/merkle.js';

const PIECE = 64 * 1024;
// Canonical order sorts files by path.
const CONFIG = 0;
const SHARD = 1;
const digest = (text: string): string => createHash('sha256').update(text).digest('hex');

function sampleManifest(): Manifest {
  const a = [digest('a0'), digest('a1')];
  const b = [digest('b0')];
  return {
    pieceSize: PIECE,
    files: [
      {
        path: 'model-00001-of-00002.safetensors',
        size: PIECE + 10,
        merkleRoot: merkleRoot(a),
        pieces: a,
        tensors: [{ name: 'w', dtype: 'BF16', shape: [2, 3], start: 16, end: 28 }],
      },
      { path: 'config.json', size: 100, merkleRoot: merkleRoot(b), pieces: b },
    ],
  };
}

function mutate(
  edit: (doc: Record<string, unknown> & { files: Array<Record<string, unknown>> }) => void,
): Buffer {
  const doc = JSON.parse(encodeManifest(sampleManifest()).toString('utf8')) as Record<string, unknown> & {
    files: Array<Record<string, unknown>>;
  };
  edit(doc);
  return Buffer.from(JSON.stringify(doc));
}

function rejects(bytes: Buffer, code: ErrorCode): void {
  assert.throws(
    () => parseManifest(bytes, 'hostile.json'),
    (error: unknown) => isWeightcastError(error, code),
    `expected ${code}`,
  );
}

test('the encoding is canonical: file order and key order do not change the digest', () => {
  const manifest = sampleManifest();
  const reordered: Manifest = { pieceSize: manifest.pieceSize, files: [...manifest.files].reverse() };
  assert.equal(manifestDigest(manifest), manifestDigest(reordered));
  assert.deepEqual(encodeManifest(manifest), encodeManifest(reordered));
  assert.match(manifestDigest(manifest), /^sha256:[0-9a-f]{64}$/);
  assert.equal(
    manifestDigest(manifest),
    'sha256:' + createHash('sha256').update(encodeManifest(manifest)).digest('hex'),
  );
});

test('parse(encode(m)) round-trips to the same digest', () => {
  const manifest = sampleManifest();
  const parsed = parseManifest(encodeManifest(manifest), 'm.json');
  assert.equal(manifestDigest(parsed), manifestDigest(manifest));
});

test('a changed piece digest changes the model digest', () => {
  const manifest = sampleManifest();
  const other = sampleManifest();
  const file = other.files[1];
  assert.ok(file);
  file.pieces = [digest('tampered')];
  file.merkleRoot = merkleRoot(file.pieces);
  assert.notEqual(manifestDigest(manifest), manifestDigest(other));
});

test('hostile paths are rejected', () => {
  for (const path of ['../etc/passwd', 'a/../../b', '/etc/passwd', 'a\0b', 'a//b', './a', 'C:\\x', '']) {
    rejects(
      mutate((doc) => {
        (doc.files[CONFIG] as Record<string, unknown>)['path'] = path;
      }),
      'MANIFEST_UNSAFE_PATH',
    );
  }
});

test('sizes that do not add up are rejected', () => {
  rejects(
    mutate((doc) => {
      (doc.files[CONFIG] as Record<string, unknown>)['size'] = PIECE * 3;
    }),
    'MANIFEST_SIZE_MISMATCH',
  );
  rejects(
    mutate((doc) => {
      const tensors = (doc.files[SHARD] as Record<string, unknown>)['tensors'] as Array<
        Record<string, unknown>
      >;
      (tensors[0] as Record<string, unknown>)['end'] = PIECE * 4;
    }),
    'MANIFEST_SIZE_MISMATCH',
  );
  rejects(
    mutate((doc) => {
      (doc.files[CONFIG] as Record<string, unknown>)['size'] = -1;
    }),
    'MANIFEST_INVALID',
  );
  rejects(
    mutate((doc) => {
      (doc.files[CONFIG] as Record<string, unknown>)['size'] = 2 ** 60;
    }),
    'MANIFEST_INVALID',
  );
});

test('a Merkle root that does not match the pieces is rejected', () => {
  rejects(
    mutate((doc) => {
      (doc.files[CONFIG] as Record<string, unknown>)['merkleRoot'] = digest('nope');
    }),
    'MANIFEST_DIGEST_MISMATCH',
  );
});

test("merkleRoots 'skip' (the scheduler's parse) leaves the roots unchecked and checks all else", () => {
  const badRoot = mutate((doc) => {
    (doc.files[CONFIG] as Record<string, unknown>)['merkleRoot'] = digest('nope');
  });
  const parsed = parseManifest(badRoot, 'the registered manifest', { merkleRoots: 'skip' });
  assert.equal(parsed.files[CONFIG]?.merkleRoot, digest('nope'));
  const alsoShort = mutate((doc) => {
    const file = doc.files[CONFIG] as Record<string, unknown>;
    file['merkleRoot'] = digest('nope');
    file['pieces'] = [];
  });
  assert.throws(
    () => parseManifest(alsoShort, 'the registered manifest', { merkleRoots: 'skip' }),
    (error: unknown) => isWeightcastError(error, 'MANIFEST_SIZE_MISMATCH'),
  );
});

test('duplicate paths, file-and-directory clashes, bad JSON and bad piece sizes are rejected', () => {
  rejects(
    mutate((doc) => {
      (doc.files[CONFIG] as Record<string, unknown>)['path'] = 'model-00001-of-00002.safetensors';
    }),
    'MANIFEST_INVALID',
  );
  rejects(
    mutate((doc) => {
      (doc.files[CONFIG] as Record<string, unknown>)['path'] = 'model-00001-of-00002.safetensors/x';
    }),
    'MANIFEST_INVALID',
  );
  rejects(Buffer.from('{not json'), 'MANIFEST_INVALID');
  rejects(
    mutate((doc) => {
      doc['pieceSize'] = 7;
    }),
    'MANIFEST_INVALID',
  );
  rejects(
    mutate((doc) => {
      doc['format'] = 'something-else';
    }),
    'MANIFEST_INVALID',
  );
});
