/**
 * A join over the agent's local API checks the manifest's Merkle roots after its first requests
 * (JoinOptions.merkleRootsUnchecked): a manifest whose root does not match its piece digests is
 * accepted, fetched from, and then stopped with MANIFEST_DIGEST_MISMATCH, with no file of its bytes
 * under its final name in the destination; a right manifest completes there as before.
 */

import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { encodeManifest, manifestDigest, type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent, type ModelStatus } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { sameFiles, smallModelWithManifest, tempDir } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let origin: FileServer;
let scheduler: SchedulerServer;
let agent: Agent;

before(async () => {
  work = await tempDir('join-roots');
  ({ modelDir, manifest } = await smallModelWithManifest(work.path));
  origin = await startFileServer({ root: modelDir });
  scheduler = await startScheduler();
  agent = await Agent.start({
    schedulerUrl: scheduler.url,
    cacheDir: join(work.path, 'cache'),
    destinationRoots: [work.path],
  });
});

after(async () => {
  await agent?.close();
  await scheduler?.close();
  await origin?.close();
  await work?.cleanup();
});

/**
 * POST /v1/local/models with `model` into `to`, as `weightcast pull` does; once answered (200), the
 * model's status when it has completed or failed.
 */
async function joinAndSettle(model: Manifest, to: string): Promise<ModelStatus> {
  const url = new URL(agent.url);
  const text = JSON.stringify({ source: origin.url, manifest: encodeManifest(model).toString('utf8'), to });
  const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: '/v1/local/models',
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
        timeout: 10_000,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(text);
  });
  assert.equal(answer.status, 200, answer.body);
  return settled(manifestDigest(model).slice('sha256:'.length));
}

async function settled(hex: string): Promise<ModelStatus> {
  for (let waits = 0; waits < 200; waits++) {
    const status = agent.status(hex);
    if (status.complete || status.failed !== undefined) return status;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`the model ${hex} neither completed nor failed in 10 s`);
}

describe("a join checks the manifest's Merkle roots after its first requests", { timeout: 30_000 }, () => {
  it('stops a manifest whose root is wrong, with no file at its final name', async () => {
    const largest = manifest.files.reduce((a, b) => (b.size > a.size ? b : a));
    const wrong: Manifest = {
      ...manifest,
      files: manifest.files.map((file) =>
        file === largest ? { ...file, merkleRoot: '0'.repeat(64) } : file,
      ),
    };
    const to = join(work.path, 'wrong-root');
    const status = await joinAndSettle(wrong, to);
    assert.equal(status.complete, false);
    assert.equal(status.failed?.code, 'MANIFEST_DIGEST_MISMATCH', JSON.stringify(status));
    assert.match(
      status.failed?.message ?? '',
      new RegExp(largest.path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')),
    );
    const entries = await readdir(to, { recursive: true, withFileTypes: true }).catch(() => []);
    const finals = entries
      .filter((entry) => entry.isFile())
      .map((entry) => join(entry.parentPath ?? entry.path, entry.name))
      .filter((path) => !path.includes('.weightcast'))
      // An empty file has no piece to wait for: the store makes it when it opens, as before.
      .filter((path) => manifest.files.some((file) => file.size > 0 && join(to, file.path) === path));
    assert.deepEqual(finals, [], 'no file with bytes under its final name');
  });

  it('completes a right manifest at the destination', async () => {
    const to = join(work.path, 'right-root');
    const status = await joinAndSettle(manifest, to);
    assert.equal(status.failed, undefined, JSON.stringify(status));
    assert.ok(status.complete);
    assert.ok(
      await sameFiles(
        to,
        modelDir,
        manifest.files.map((file) => file.path),
      ),
    );
  });
});
