/**
 * Seed nodes against strangers (issue 16, findings 3 and 5): a read takes an upload slot before any
 * buffer and streams through one bounded chunk (40 slow readers cost slots x chunk, not 40 ranges);
 * `/copy` pulls only from nodes the catalog names (no fetching arbitrary URLs); a node takes only
 * models the catalog has (a `put` announces its model first). In-process catalog and seed nodes on
 * loopback with real sockets.
 */

import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isWeightcastError } from '../../../src/errors.js';
import { buildManifest } from '../../../src/manifest/build.js';
import { encodeManifest, manifestDigest, type Manifest } from '../../../src/manifest/manifest.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { CatalogClient } from '../../../src/seed/catalog/client.js';
import { catalogRoutes } from '../../../src/seed/catalog/routes.js';
import { CatalogStore } from '../../../src/seed/catalog/store.js';
import { SeedNodeClient } from '../../../src/seed/node/client.js';
import { SeedNode, UPLOAD_CHUNK_BYTES } from '../../../src/seed/node/seed-node.js';
import { putModel } from '../../../src/seed/put/put.js';
import { Agent } from '../../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../../src/swarm/scheduler/scheduler-server.js';
import { deterministicBytes, tempDir, writeSmallModel } from '../../helpers/fixtures.js';

const UPLOADS_MAX = 2;
const WAIT_MS_MAX = 5000;

let work: { path: string; cleanup: () => Promise<void> };
let store: CatalogStore;
let scheduler: SchedulerServer;
const nodes: Array<{ seed: SeedNode; agent: Agent }> = [];
let manifest: Manifest;
let hex: string;
/** A model of one piece larger than loopback sockets can buffer, for the readers that never read. */
let bigManifest: Manifest;
let bigHex: string;

/**
 * Bytes a connection's kernel buffers can hold at most on this machine: the sender's send buffer and
 * the receiver's receive buffer at their ceilings (tcp_wmem and tcp_rmem, third fields). A piece
 * larger than that cannot be taken whole by a reader that stops reading, whatever the kernel has
 * learnt of loopback connections before (its cached TCP metrics let windows open at once).
 */
async function socketBufferCeiling(): Promise<number> {
  const ceiling = async (name: string): Promise<number> => {
    const text = await readFile(`/proc/sys/net/ipv4/${name}`, 'utf8').catch(() => '');
    const value = Number(text.trim().split(/\s+/)[2]);
    return Number.isSafeInteger(value) && value > 0 ? value : 32 * 1024 * 1024;
  };
  return (await ceiling('tcp_wmem')) + (await ceiling('tcp_rmem'));
}

before(async () => {
  work = await tempDir('seed-limits');
  const modelDir = join(work.path, 'model');
  await writeSmallModel(modelDir);
  await writeFile(join(modelDir, 'blob.bin'), deterministicBytes('blob', 6 * UPLOAD_CHUNK_BYTES));
  const origin = new LocalOrigin(modelDir);
  try {
    // Pieces of 4 chunks, so a whole-file read would need far more than one chunk.
    manifest = await buildManifest(origin, { pieceSize: 4 * UPLOAD_CHUNK_BYTES });
    hex = manifestDigest(manifest).slice('sha256:'.length);
    store = await CatalogStore.open(join(work.path, 'catalog'));
    scheduler = await startScheduler({ catalog: catalogRoutes(store) });
    for (const name of ['a', 'b']) {
      const seed = await SeedNode.open({
        dir: join(work.path, name),
        catalogUrl: scheduler.url,
        uploadsMax: UPLOADS_MAX,
      });
      const agent = await Agent.start({
        schedulerUrl: scheduler.url,
        cacheDir: join(work.path, `${name}-cache`),
        seedRoutes: seed.handle,
      });
      await seed.register(scheduler.url, name, agent.url);
      nodes.push({ seed, agent });
    }
    await putModel({
      schedulerUrl: scheduler.url,
      origin,
      manifest,
      policy: 'round-robin',
      replicas: 1,
    });
  } finally {
    await origin.close();
  }
  // One piece of whole chunks, more than the sockets can buffer (at most 128 MiB).
  const chunks = Math.min(128, Math.ceil((await socketBufferCeiling()) / UPLOAD_CHUNK_BYTES) + 4);
  const bigDir = join(work.path, 'big-model');
  await mkdir(bigDir);
  await writeFile(join(bigDir, 'big.bin'), Buffer.alloc(chunks * UPLOAD_CHUNK_BYTES, 'big'));
  const bigOrigin = new LocalOrigin(bigDir);
  try {
    bigManifest = await buildManifest(bigOrigin, { pieceSize: chunks * UPLOAD_CHUNK_BYTES });
    bigHex = manifestDigest(bigManifest).slice('sha256:'.length);
    await putModel({
      schedulerUrl: scheduler.url,
      origin: bigOrigin,
      manifest: bigManifest,
      policy: 'round-robin',
      replicas: 1,
    });
  } finally {
    await bigOrigin.close();
  }
});

after(async () => {
  for (const node of nodes) await node.agent.close();
  await scheduler.close();
  await store.close();
  await work.cleanup();
});

function node(index: number): { seed: SeedNode; agent: Agent } {
  const found = nodes[index];
  assert.ok(found !== undefined);
  return found;
}

describe('seed node reads', () => {
  it('40 readers that never read: slots before buffers, one chunk per slot', async () => {
    // The big model's one piece, on the node the catalog gives it to: a reader that stops reading
    // holds its slot, since its sockets cannot take the whole piece.
    const snapshot = await new CatalogClient(scheduler.url).requireSnapshot(bigHex);
    const entry = snapshot.pieces.find((candidate) => candidate.sizeBytes === bigManifest.pieceSize);
    assert.ok(entry !== undefined, 'the test needs a whole piece');
    const piece = entry.index;
    const { seed, agent } = node(entry.holders[0] === 'a' ? 0 : 1);
    const url = new URL(agent.url);
    const sockets: Socket[] = [];
    const answers: string[] = [];
    try {
      for (let i = 0; i < 40; i++) {
        const socket = connect({ host: url.hostname, port: Number(url.port) });
        socket.on('error', () => undefined);
        const index = answers.push('') - 1;
        socket.once('data', (chunk: Buffer) => {
          answers[index] = chunk.subarray(0, 12).toString('latin1');
          socket.pause(); // a reader that stops reading holds its slot
        });
        socket.write(`GET /v1/seed/models/${bigHex}/pieces/${piece} HTTP/1.1\r\nHost: x\r\n\r\n`);
        sockets.push(socket);
      }
      await waitFor(() => answers.every((answer) => answer.length > 0));
      const served = answers.filter((answer) => answer === 'HTTP/1.1 200').length;
      const busy = answers.filter((answer) => answer === 'HTTP/1.1 503').length;
      assert.equal(served, UPLOADS_MAX);
      assert.equal(busy, 40 - UPLOADS_MAX);
      assert.ok(
        seed.uploadBuffers.peakBytes <= UPLOADS_MAX * UPLOAD_CHUNK_BYTES,
        `read buffers peaked at ${seed.uploadBuffers.peakBytes} bytes`,
      );
    } finally {
      for (const socket of sockets) socket.destroy();
    }
    await waitFor(() => seed.uploadBuffers.bytes === 0);
  });

  it('a read streamed in chunks is byte-identical to the piece', async () => {
    const snapshot = await new CatalogClient(scheduler.url).requireSnapshot(hex);
    const entry = snapshot.pieces.find((candidate) => candidate.sizeBytes === manifest.pieceSize);
    assert.ok(entry !== undefined);
    const piece = entry.index;
    const { agent } = node(entry.holders[0] === 'a' ? 0 : 1);
    const bytes = await new SeedNodeClient('a', agent.url).getPiece(hex, piece, manifest.pieceSize);
    const { createHash } = await import('node:crypto');
    const expected = manifest.files.flatMap((file) => file.pieces)[piece];
    assert.equal(createHash('sha256').update(bytes).digest('hex'), expected);
  });

  it('a range across pieces is streamed in chunks, byte-identical to the file', async () => {
    const blob = deterministicBytes('blob', 6 * UPLOAD_CHUNK_BYTES);
    const start = 3 * UPLOAD_CHUNK_BYTES + 5;
    const end = 5 * UPLOAD_CHUNK_BYTES + 7;
    const statuses: number[] = [];
    for (const { agent } of nodes) {
      const response = await fetch(`${agent.url}/v1/seed/models/${hex}/files/blob.bin`, {
        headers: { range: `bytes=${start}-${end - 1}` },
        signal: AbortSignal.timeout(WAIT_MS_MAX),
      });
      statuses.push(response.status);
      const body = Buffer.from(await response.arrayBuffer());
      if (response.status !== 206) continue;
      assert.equal(Buffer.compare(body, blob.subarray(start, end)), 0);
      return;
    }
    assert.fail(`no node held both pieces under the range: ${statuses.join(', ')}`);
  });
});

describe('copies and models only from the catalog', () => {
  let lure: Server;
  let lureRequests = 0;
  before(async () => {
    lure = createServer((_req, res) => {
      lureRequests++;
      res.end('{}');
    });
    await new Promise<void>((resolve) => lure.listen(0, '127.0.0.1', resolve));
  });
  after(async () => {
    await new Promise<void>((resolve) => lure.close(() => resolve()));
  });

  it('/copy from a URL the catalog does not name is FORBIDDEN and fetches nothing', async () => {
    const { agent } = node(1);
    const address = lure.address() as { port: number };
    const target = new SeedNodeClient('b', agent.url);
    await assert.rejects(target.copyFrom(hex, 0, `http://127.0.0.1:${address.port}`), (error) =>
      isWeightcastError(error, 'FORBIDDEN'),
    );
    assert.equal(lureRequests, 0);
  });

  it('/copy from a node the catalog names works', async () => {
    const target = new SeedNodeClient('b', node(1).agent.url);
    const piece = (await new SeedNodeClient('a', node(0).agent.url).held(hex))[0];
    assert.ok(piece !== undefined);
    await target.deletePiece(hex, piece);
    assert.equal(await target.copyFrom(hex, piece, node(0).agent.url), 'stored');
  });

  it('a model the catalog lacks is refused; once announced it is taken', async () => {
    // The same files cut in other pieces: another model, which no put announced.
    const origin = new LocalOrigin(join(work.path, 'model'));
    const stranger = await buildManifest(origin, { pieceSize: manifest.pieceSize / 2 }).finally(() =>
      origin.close(),
    );
    const strangerHex = manifestDigest(stranger).slice('sha256:'.length);
    const client = new SeedNodeClient('a', node(0).agent.url);
    await assert.rejects(client.putManifest(stranger), (error) => isWeightcastError(error, 'FORBIDDEN'));
    await assert.rejects(client.putPiece(strangerHex, 0, Buffer.alloc(16)), (error) =>
      isWeightcastError(error, 'SEED_UNKNOWN_MODEL'),
    );
    await new CatalogClient(scheduler.url).announceModel(stranger);
    await client.putManifest(stranger);
    assert.deepEqual(await client.held(strangerHex), []);
  });
});

describe('announced models in the catalog store', () => {
  it('survive a reopen, and a created model is no longer only announced', async () => {
    const dir = join(work.path, 'announce-catalog');
    const first = await CatalogStore.open(dir);
    await first.announceModel(manifest);
    assert.equal(first.hasModel(hex), false);
    await first.close();
    const second = await CatalogStore.open(dir);
    try {
      assert.deepEqual(await second.manifestBytes(hex), encodeManifest(manifest));
      await second.registerNode('a', 'http://127.0.0.1:1');
      const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
      await second.createModel(
        manifest,
        Array.from({ length: pieces }, () => ['a']),
      );
      assert.equal(second.hasModel(hex), true);
    } finally {
      await second.close();
    }
  });
});

async function waitFor(condition: () => boolean): Promise<void> {
  for (let waited = 0; !condition(); waited += 20) {
    assert.ok(waited < WAIT_MS_MAX, 'condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
