import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isWeightcastError } from '../../src/errors.js';
import { buildManifest } from '../../src/manifest/build.js';
import { manifestDigest, type Manifest } from '../../src/manifest/manifest.js';
import { verifyDirectory } from '../../src/manifest/verify.js';
import { startFileServer, type FaultHook } from '../../src/origin/file-server.js';
import { HttpOrigin } from '../../src/origin/http.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { pull, type PullEvent } from '../../src/pull/pull.js';
import { pullFixture, sameFiles } from '../helpers/fixtures.js';

const PIECE = 64 * 1024;
const MODEL_FILES = [
  'config.json',
  'model-00001-of-00002.safetensors',
  'model-00002-of-00002.safetensors',
  'model.safetensors.index.json',
  'sub/empty.txt',
];

function fixture(
  label: string,
): Promise<{ root: string; dest: string; manifest: Manifest; cleanup: () => Promise<void> }> {
  return pullFixture(label, PIECE, 2);
}

function fastHttp(url: string, manifest?: Manifest): HttpOrigin {
  return new HttpOrigin(url, {
    retries: 4,
    backoffBaseMs: 1,
    backoffMaxMs: 5,
    retryAfterMaxMs: 1500,
    bodyIdleTimeoutMs: 300,
    headersTimeoutMs: 2000,
    random: () => 0.5,
    ...(manifest ? { files: manifest.files.map((f) => ({ path: f.path, size: f.size })) } : {}),
  });
}

test('pulls a local model with a manifest: identical bytes, final names only, state cleaned', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-local');
  try {
    const origin = new LocalOrigin(root);
    const result = await pull(origin, dest, { manifest, concurrency: 3 });
    await origin.close();
    assert.equal(result.trust, false);
    assert.equal(result.manifestDigest, manifestDigest(manifest));
    assert.ok(await sameFiles(root, dest, MODEL_FILES));
    assert.equal((await verifyDirectory(dest, manifest, { threads: 1 })).ok, true);
    assert.deepEqual(await readdir(join(dest, '.weightcast')), ['manifest.json', 'pull.json']);
  } finally {
    await cleanup();
  }
});

test('pulls over HTTP through 503 + Retry-After, 429, resets, stalls and wrong bytes', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-faults');
  // Each piece's first request meets one kind of fault; retries of it (any sub-range) go through.
  const seen = new Set<string>();
  const faults: FaultHook = (request) => {
    if (request.method !== 'GET' || request.range === undefined) return undefined;
    const piece = Math.floor(request.range.start / PIECE);
    const key = `${request.path}:${piece}`;
    if (seen.has(key)) return undefined;
    seen.add(key);
    switch (piece % 6) {
      case 0:
        return { kind: 'status', status: 503, retryAfter: '1' };
      case 1:
        return { kind: 'status', status: 429 };
      case 2:
        return { kind: 'reset', afterBytes: 1000 };
      case 3:
        return { kind: 'stall', afterBytes: 100, ms: 1500 };
      case 4:
        return { kind: 'corrupt', offset: 7 };
      default:
        return undefined;
    }
  };
  const server = await startFileServer({ root, faults });
  const events: PullEvent[] = [];
  try {
    const origin = fastHttp(server.url, manifest);
    const result = await pull(origin, dest, { manifest, concurrency: 4, onEvent: (e) => events.push(e) });
    await origin.close();
    assert.ok(await sameFiles(root, dest, MODEL_FILES));
    assert.ok(result.piecesRejected >= 1, 'the corrupted piece was rejected');
    assert.ok(events.some((e) => e.type === 'piece-rejected'));
  } finally {
    await server.close();
    await cleanup();
  }
});

test('an origin that keeps sending wrong bytes fails the pull with a typed error and no file under its final name', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-corrupt');
  const target = 'model-00002-of-00002.safetensors';
  const server = await startFileServer({
    root,
    faults: (request) =>
      request.path === target && request.method === 'GET' ? { kind: 'corrupt', offset: 3 } : undefined,
  });
  try {
    const origin = fastHttp(server.url, manifest);
    await assert.rejects(
      pull(origin, dest, { manifest, concurrency: 2, pieceRetries: 2 }),
      (error: unknown) => isWeightcastError(error, 'PIECE_HASH_MISMATCH') && error.details.file === target,
    );
    await origin.close();
    assert.equal(existsSync(join(dest, target)), false, 'no corrupt file under its final name');
    // Whatever did land under a final name is complete and correct.
    for (const path of MODEL_FILES.filter((p) => p !== target)) {
      if (existsSync(join(dest, path))) assert.ok(await sameFiles(root, dest, [path]), path);
    }
  } finally {
    await server.close();
    await cleanup();
  }
});

test('a piece a changed local copy gets wrong comes from the fallback origin, once, and the rest from the copy', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-fallback');
  const copy = join(dest, '..', 'copy');
  const server = await startFileServer({ root });
  try {
    const local = new LocalOrigin(root);
    await pull(local, copy, { manifest });
    await local.close();
    const target = 'model-00001-of-00002.safetensors';
    const changed = await readFile(join(copy, target));
    changed[PIECE + 5] = (changed[PIECE + 5] ?? 0) ^ 0xff;
    await writeFile(join(copy, target), changed);
    const origin = new LocalOrigin(copy);
    const fallback = fastHttp(server.url, manifest);
    const events: PullEvent[] = [];
    const result = await pull(origin, dest, {
      manifest,
      fallbackOrigin: fallback,
      onEvent: (event) => events.push(event),
    });
    await Promise.all([origin.close(), fallback.close()]);
    assert.ok(await sameFiles(root, dest, MODEL_FILES));
    assert.equal(result.piecesRejected, 1);
    const rejected = events.filter((event) => event.type === 'piece-rejected');
    assert.deepEqual(
      rejected.map((event) => [event.path, event.piece, event.origin]),
      [[target, 1, origin.location]],
    );
    // The fallback was asked for that piece only.
    assert.equal(server.stats.bytesSent, PIECE);
  } finally {
    await server.close();
    await cleanup();
  }
});

test('without a manifest a remote pull trusts the origin and records the same manifest', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-trust');
  const server = await startFileServer({ root });
  try {
    const origin = fastHttp(server.url);
    const events: PullEvent[] = [];
    const result = await pull(origin, dest, { pieceSize: PIECE, onEvent: (e) => events.push(e) });
    await origin.close();
    assert.equal(result.trust, true);
    assert.ok(events.some((e) => e.type === 'plan' && e.trust));
    // HTTP has no directory listing: the index, its shards and the companion files are what exists.
    const listed = result.manifest.files.map((f) => f.path);
    assert.deepEqual(
      listed,
      MODEL_FILES.filter((p) => p !== 'sub/empty.txt'),
    );
    assert.ok(await sameFiles(root, dest, listed));
    const local = new LocalOrigin(dest);
    const rebuilt = await buildManifest(local, { pieceSize: PIECE, threads: 1 });
    await local.close();
    const sameFilesManifest: Manifest = {
      pieceSize: PIECE,
      files: rebuilt.files.filter((f) => listed.includes(f.path)),
    };
    assert.equal(result.manifestDigest, manifestDigest(sameFilesManifest));
    assert.ok(
      result.manifest.files.some((f) => (f.tensors?.length ?? 0) > 0),
      'tensor index recorded',
    );
    assert.equal(manifest.files.length, MODEL_FILES.length);
  } finally {
    await server.close();
    await cleanup();
  }
});

test('a hostile manifest is refused before anything is fetched', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-hostile');
  const server = await startFileServer({ root });
  try {
    const hostile = {
      ...manifest,
      files: manifest.files.map((f, i) => (i === 0 ? { ...f, path: '../escape' } : f)),
    };
    const origin = fastHttp(server.url);
    await assert.rejects(pull(origin, dest, { manifest: hostile }), (error: unknown) =>
      isWeightcastError(error, 'MANIFEST_UNSAFE_PATH'),
    );
    await origin.close();
    assert.equal(server.stats.requests, 0);
  } finally {
    await server.close();
    await cleanup();
  }
});

test('a second pull into a complete directory fetches nothing', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-again');
  const server = await startFileServer({ root });
  try {
    const first = fastHttp(server.url, manifest);
    await pull(first, dest, { manifest });
    await first.close();
    const requestsAfterFirst = server.stats.requests;
    const second = fastHttp(server.url, manifest);
    const result = await pull(second, dest, { manifest });
    await second.close();
    assert.equal(result.piecesFetched, 0);
    assert.equal(server.stats.requests, requestsAfterFirst);
    assert.ok((await readFile(join(dest, 'config.json'))).length > 0);
  } finally {
    await server.close();
    await cleanup();
  }
});

test('the memory budget bounds the pieces in flight', async () => {
  const { root, dest, manifest, cleanup } = await fixture('pull-budget');
  try {
    const origin = new LocalOrigin(root);
    let inFlight = 0;
    let peak = 0;
    const counting: typeof origin = Object.assign(Object.create(origin) as LocalOrigin, {
      readInto: async (...args: Parameters<LocalOrigin['readInto']>) => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        try {
          await origin.readInto(...args);
        } finally {
          inFlight--;
        }
      },
    });
    const events: PullEvent[] = [];
    await pull(counting, dest, {
      manifest,
      concurrency: 8,
      memoryBytes: 3 * PIECE,
      onEvent: (e) => events.push(e),
    });
    await origin.close();
    const plan = events.find((e) => e.type === 'plan');
    assert.equal(plan?.type === 'plan' ? plan.lanes : undefined, 3);
    assert.ok(peak <= 3, `at most 3 pieces in flight, saw ${peak}`);
    assert.ok(await sameFiles(root, dest, MODEL_FILES));
  } finally {
    await cleanup();
  }
});
