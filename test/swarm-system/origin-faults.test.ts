/**
 * Origin faults end in a clear error (issue 16, finding 6): an outage is waited out with backoff
 * for a configurable budget, with progress shown, then fails with ORIGIN_RETRIES_EXHAUSTED; an
 * origin answering 404 for a file stops a swarm model with ORIGIN_NOT_FOUND instead of having the
 * scheduler assign the read again forever. A real file server on loopback with injected faults;
 * budgets of about a second keep each test short.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { CLI } from '../../scripts/cluster.js';
import { isWeightcastError } from '../../src/errors.js';
import { encodeManifest, manifestDigest, type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer, type FaultHook } from '../../src/origin/file-server.js';
import { HttpOrigin, type RetryEvent } from '../../src/origin/http.js';
import { LocalOrigin } from '../../src/origin/local.js';
import type { Origin } from '../../src/origin/origin.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { PieceStore } from '../../src/piece/store.js';
import { SwarmMember } from '../../src/swarm/agent/member.js';
import { Throttle } from '../../src/util/throttle.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { swarmPull } from '../../src/swarm/swarm-pull.js';
import { tempDir, smallModelWithManifest } from '../helpers/fixtures.js';
import { testIdentity } from '../helpers/swarm.js';

const run = promisify(execFile);

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let manifestPath: string;
let scheduler: SchedulerServer;
let fault: FaultHook | undefined;
let server: FileServer;
const SHARD = 'model-00001-of-00002.safetensors';

before(async () => {
  work = await tempDir('origin-faults');
  ({ modelDir, manifest, manifestPath } = await smallModelWithManifest(work.path));
  server = await startFileServer({ root: modelDir, faults: (request) => fault?.(request) });
  scheduler = await startScheduler();
});

after(async () => {
  await server.close();
  await scheduler.close();
  await work.cleanup();
});

/** 503 for every request until `ms` from now. */
function outageFor(ms: number): FaultHook {
  const endMs = performance.now() + ms;
  return () => (performance.now() < endMs ? { kind: 'status', status: 503 } : undefined);
}

describe('an origin outage', { timeout: 60_000 }, () => {
  it('shorter than the budget is waited out, each retry reported with the time waited', async () => {
    fault = outageFor(1000);
    const events: RetryEvent[] = [];
    const origin = new HttpOrigin(server.url, {
      retryBudgetMs: 10_000,
      backoffMaxMs: 200,
      onRetry: (event) => events.push(event),
    });
    try {
      const target = new Uint8Array(1024);
      await origin.readInto(SHARD, 0, target);
      assert.ok(events.length >= 2, `${events.length} retries`);
      assert.ok(events.every((event) => event.budgetMs === 10_000));
      const last = events.at(-1);
      assert.ok(last !== undefined && last.elapsedMs >= 500, 'the outage was not waited out');
    } finally {
      fault = undefined;
      await origin.close();
    }
  });

  it('longer than the budget fails with ORIGIN_RETRIES_EXHAUSTED once the budget is spent', async () => {
    fault = outageFor(60_000);
    const origin = new HttpOrigin(server.url, { retryBudgetMs: 800, backoffMaxMs: 200 });
    const started = performance.now();
    try {
      await assert.rejects(origin.readInto(SHARD, 0, new Uint8Array(1024)), (error: unknown) => {
        assert.ok(isWeightcastError(error, 'ORIGIN_RETRIES_EXHAUSTED'), String(error));
        assert.match(error.message, /retry budget 1 s/);
        assert.ok(Number(error.details['attempts']) > 1);
        return true;
      });
      const waitedMs = performance.now() - started;
      assert.ok(waitedMs >= 800 && waitedMs < 5000, `failed after ${Math.round(waitedMs)} ms`);
    } finally {
      fault = undefined;
      await origin.close();
    }
  });

  it('the default budget is 60 s', async () => {
    let once = false;
    fault = () => (once ? undefined : ((once = true), { kind: 'status', status: 503 }));
    const events: RetryEvent[] = [];
    const origin = new HttpOrigin(server.url, { random: () => 0, onRetry: (event) => events.push(event) });
    try {
      await origin.readInto(SHARD, 0, new Uint8Array(16));
      assert.equal(events[0]?.budgetMs, 60_000);
    } finally {
      fault = undefined;
      await origin.close();
    }
  });

  it('pull --origin-retry-s: progress while waiting, then a clear error (exit 1)', async () => {
    fault = outageFor(60_000);
    try {
      const failed = await run(
        process.execPath,
        [CLI, 'pull', server.url, '--to', join(work.path, 'cli-pull'), '--no-agent', '--origin-retry-s', '1'],
        { timeout: 30_000 },
      ).then(
        () => assert.fail('the pull should fail'),
        (error: { code?: number; stderr?: string }) => error,
      );
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /origin unavailable for .*retry 1 in/);
      assert.match(failed.stderr ?? '', /ORIGIN_RETRIES_EXHAUSTED: .*retry budget 1 s/);
    } finally {
      fault = undefined;
    }
  });

  it('through the swarm, past the budget, stops the model with ORIGIN_RETRIES_EXHAUSTED', async () => {
    fault = outageFor(60_000);
    const retries: string[] = [];
    try {
      await assert.rejects(
        swarmPull(server.url, join(work.path, 'swarm-outage'), {
          manifest,
          schedulerUrl: scheduler.url,
          originRetryBudgetMs: 600,
          signal: AbortSignal.timeout(30_000),
          onEvent: (event) => {
            if (event.type === 'origin-retry') retries.push(event.path);
          },
        }),
        (error: unknown) => isWeightcastError(error, 'ORIGIN_RETRIES_EXHAUSTED'),
      );
      assert.ok(retries.length > 0, 'no origin-retry event was reported');
    } finally {
      fault = undefined;
    }
  });

  it('through an agent, past its budget, fails the pull with ORIGIN_RETRIES_EXHAUSTED (exit 1)', async () => {
    fault = outageFor(60_000);
    // The agent's origin budget runs out while the pull waits on its status (a long poll): the pull
    // must hear the agent's reason, not "the agent answered HTTP 500".
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'agent-outage-cache'),
      originRetryBudgetMs: 600,
    });
    try {
      const failed = await run(
        process.execPath,
        [CLI, 'pull', server.url, '--to', join(work.path, 'agent-outage'), '--manifest', manifestPath],
        { env: { ...process.env, WEIGHTCAST_AGENT: agent.url }, timeout: 30_000 },
      ).then(
        () => assert.fail('the pull should fail'),
        (error: { code?: number; stderr?: string }) => error,
      );
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /ORIGIN_RETRIES_EXHAUSTED: the agent at .*: read of /);
      assert.doesNotMatch(failed.stderr ?? '', /SWARM_PROTOCOL/);
      assert.equal(
        agent.status(manifestDigest(manifest).slice('sha256:'.length)).failed?.code,
        'ORIGIN_RETRIES_EXHAUSTED',
      );
    } finally {
      fault = undefined;
      await agent.close();
    }
  });
});

describe('an origin that keeps sending wrong bytes for a piece', { timeout: 60_000 }, () => {
  // Every read of the shard's first piece has a byte flipped; the rest of the model is fine.
  const firstPieceCorrupt: FaultHook = (request) =>
    request.path === SHARD && request.method === 'GET' && (request.range?.start ?? 0) === 0
      ? { kind: 'corrupt', offset: 10 }
      : undefined;

  it('stops pull --scheduler with PIECE_HASH_MISMATCH after a bounded number of copies', async () => {
    fault = firstPieceCorrupt;
    const requestsBefore = server.stats.requests;
    const corrupt: unknown[] = [];
    try {
      await assert.rejects(
        swarmPull(server.url, join(work.path, 'swarm-corrupt'), {
          manifest,
          schedulerUrl: scheduler.url,
          signal: AbortSignal.timeout(30_000),
          onEvent: (event) => {
            if (event.type === 'piece' && event.outcome === 'corrupt') corrupt.push(event.file);
          },
        }),
        (error: unknown) =>
          isWeightcastError(error, 'PIECE_HASH_MISMATCH') && /wrong bytes 4 times/.test(String(error)),
      );
      // Before, the swarm assigned the piece from the origin again and again (~1,200 times a second).
      const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
      const requests = server.stats.requests - requestsBefore;
      assert.ok(requests <= pieces + 8, `${requests} origin requests for ${pieces} pieces`);
      // Each rejected copy names its file and its piece in that file, as the error does.
      assert.deepEqual(corrupt, Array(4).fill({ path: SHARD, piece: 0 }));
    } finally {
      fault = undefined;
    }
  });

  it('fails a pull through an agent with PIECE_HASH_MISMATCH (exit 1)', async () => {
    fault = firstPieceCorrupt;
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'corrupt-cache'),
    });
    try {
      const failed = await run(
        process.execPath,
        [CLI, 'pull', server.url, '--to', join(work.path, 'agent-corrupt'), '--manifest', manifestPath],
        { env: { ...process.env, WEIGHTCAST_AGENT: agent.url }, timeout: 30_000 },
      ).then(
        () => assert.fail('the pull should fail'),
        (error: { code?: number; stderr?: string }) => error,
      );
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(
        failed.stderr ?? '',
        /PIECE_HASH_MISMATCH: the agent at .*: .*piece 0: the origin sent wrong bytes 4 times/,
      );
    } finally {
      fault = undefined;
      await agent.close();
    }
  });
});

describe('an origin refusing a file (403)', { timeout: 60_000 }, () => {
  it("fails a pull through an agent with ORIGIN_HTTP_STATUS (exit 1), with the agent's reason", async () => {
    fault = (request) => (request.path === SHARD ? { kind: 'status', status: 403 } : undefined);
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'refused-cache'),
    });
    try {
      const failed = await run(
        process.execPath,
        [CLI, 'pull', server.url, '--to', join(work.path, 'agent-refused'), '--manifest', manifestPath],
        { env: { ...process.env, WEIGHTCAST_AGENT: agent.url }, timeout: 30_000 },
      ).then(
        () => assert.fail('the pull should fail'),
        (error: { code?: number; stderr?: string }) => error,
      );
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /ORIGIN_HTTP_STATUS: the agent at .*403/);
    } finally {
      fault = undefined;
      await agent.close();
    }
  });
});

describe('an origin without a file the manifest names', { timeout: 60_000 }, () => {
  it('stops the swarm model with ORIGIN_NOT_FOUND, after a bounded number of requests', async () => {
    const missing = manifest.files.find((file) => file.path === SHARD);
    assert.ok(missing !== undefined);
    const served = join(work.path, 'served-without-shard');
    const { cp } = await import('node:fs/promises');
    await cp(modelDir, served, { recursive: true });
    await rm(join(served, SHARD));
    const partial = await startFileServer({ root: served });
    try {
      await assert.rejects(
        swarmPull(partial.url, join(work.path, 'swarm-404'), {
          manifest,
          schedulerUrl: scheduler.url,
          signal: AbortSignal.timeout(30_000),
        }),
        (error: unknown) => {
          assert.ok(isWeightcastError(error, 'ORIGIN_NOT_FOUND'), String(error));
          assert.match(error.message, new RegExp(SHARD.replace(/\./g, '\\.')));
          return true;
        },
      );
      // Before, the scheduler assigned the missing pieces again and again (thousands of requests).
      const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
      assert.ok(
        partial.stats.requests <= 2 * pieces,
        `${partial.stats.requests} requests for ${pieces} pieces`,
      );
    } finally {
      await partial.close();
    }
  });
});

describe('an origin whose files do not match the manifest in size or ranges', { timeout: 60_000 }, () => {
  /** A pull through a fresh in-process agent from `url`; its exit code, stderr and the requests. */
  async function pullThroughAgent(url: string, label: string): Promise<{ code?: number; stderr?: string }> {
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, `${label}-cache`),
    });
    try {
      return await run(
        process.execPath,
        [CLI, 'pull', url, '--to', join(work.path, label), '--manifest', manifestPath],
        { env: { ...process.env, WEIGHTCAST_AGENT: agent.url }, timeout: 30_000 },
      ).then(
        () => assert.fail('the pull should fail'),
        (error: { code?: number; stderr?: string }) => error,
      );
    } finally {
      await agent.close();
    }
  }

  it('a file shorter than the manifest says fails a pull through an agent with ORIGIN_SHORT_READ (exit 1)', async () => {
    const served = join(work.path, 'served-truncated');
    const { cp, truncate } = await import('node:fs/promises');
    await cp(modelDir, served, { recursive: true });
    const shard = manifest.files.find((file) => file.path === SHARD);
    assert.ok(shard !== undefined);
    await truncate(join(served, SHARD), Math.floor(shard.size / 2));
    const short = await startFileServer({ root: served });
    try {
      const failed = await pullThroughAgent(short.url, 'agent-truncated');
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(
        failed.stderr ?? '',
        /ORIGIN_SHORT_READ: the agent at .*model-00001-of-00002\.safetensors/,
      );
      // Before, the agent read the missing pieces again and again (tens of requests a second, forever).
      const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
      assert.ok(short.stats.requests <= 2 * pieces, `${short.stats.requests} requests for ${pieces} pieces`);
    } finally {
      await short.close();
    }
  });

  it('a server that ignores Range fails a pull through an agent with ORIGIN_RANGE_UNSUPPORTED (exit 1)', async () => {
    let requests = 0;
    // Every GET gets the whole file with 200, whatever range it asked for.
    const server = createServer((request, response) => {
      requests++;
      const path = join(modelDir, decodeURIComponent(new URL(request.url ?? '/', 'http://x').pathname));
      void readFile(path).then(
        (bytes) => {
          response.writeHead(200, { 'content-length': bytes.length });
          response.end(request.method === 'HEAD' ? undefined : bytes);
        },
        () => response.writeHead(404).end(),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const failed = await pullThroughAgent(`http://127.0.0.1:${port}/`, 'agent-no-ranges');
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /ORIGIN_RANGE_UNSUPPORTED: the agent at .*ignored the Range header/);
      const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
      assert.ok(requests <= 2 * pieces, `${requests} requests for ${pieces} pieces`);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('an origin read that fails with an error of no known kind', { timeout: 60_000 }, () => {
  it('stops the model with ORIGIN_RETRIES_EXHAUSTED once the same piece failed 4 times', async () => {
    const dir = await tempDir('origin-unknown-error');
    const local = new LocalOrigin(modelDir);
    let reads = 0;
    // The fault injected: every read of the shard's first piece throws a plain Error.
    const origin: Origin = {
      location: local.location,
      list: (options) => local.list(options),
      stat: (path, options) => local.stat(path, options),
      readInto: (path, offset, target, options) => {
        if (path !== SHARD || offset !== 0) return local.readInto(path, offset, target, options);
        reads++;
        return Promise.reject(new Error('something odd'));
      },
      close: () => local.close(),
    };
    const map = new PieceMap(manifest);
    const store = await PieceStore.open(map, {
      dataDir: join(dir.path, 'partial'),
      stateDir: join(dir.path, 'state'),
    });
    const member = new SwarmMember({
      model: manifestDigest(manifest).slice('sha256:'.length),
      map,
      manifestBytes: encodeManifest(manifest),
      store,
      origin,
      schedulerUrl: scheduler.url,
      identity: testIdentity('odd'),
      downloadThrottle: new Throttle(undefined),
    });
    try {
      member.start();
      await assert.rejects(
        Promise.race([
          member.complete,
          sleep(30_000, undefined, { ref: false }).then(() => assert.fail('the member never stopped')),
        ]),
        (error: unknown) => {
          assert.ok(isWeightcastError(error, 'ORIGIN_RETRIES_EXHAUSTED'), String(error));
          assert.match(error.message, /piece 0: the origin failed it 4 times; last: something odd/);
          return true;
        },
      );
      assert.equal(reads, 4);
    } finally {
      await member.close();
      await store.close();
      await origin.close();
      await dir.cleanup();
    }
  });
});
