/**
 * A fresh cache's member registers while its store is still opening (OpeningStore): the store holds
 * nothing until it is open, bytes wait for it, and a store that fails to open fails the join and
 * leaves nothing registered. Its peer wire serves the model meanwhile: a ring child subscribes at once.
 */

import assert from 'node:assert/strict';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { manifestDigest } from '../../src/manifest/manifest.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { OpeningStore } from '../../src/swarm/agent/member-store.js';
import { PieceStore } from '../../src/piece/store.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { verifyPiece } from '../../src/piece/verify.js';
import { newBitfield } from '../../src/swarm/core/bitfield.js';
import { RingFeed } from '../../src/swarm/agent/ring-feed.js';
import { startScheduler } from '../../src/swarm/scheduler/scheduler-server.js';
import { callJson } from '../../src/swarm/wire/http-json.js';
import { parseMessage, swarmStatusSchema } from '../../src/swarm/wire/protocol.js';
import { smallModelWithManifest, tempDir } from '../helpers/fixtures.js';
import { fakeManifest } from '../helpers/swarm.js';

describe('OpeningStore', () => {
  it('holds nothing until the store is open, then answers as the store; put waits for it', async () => {
    const dir = await tempDir('opening-store');
    try {
      const manifest = fakeManifest(2);
      const map = new PieceMap(manifest);
      let release: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const opening = gate.then(() =>
        PieceStore.open(map, { dataDir: join(dir.path, 'files'), stateDir: dir.path }),
      );
      const store = new OpeningStore(opening);
      assert.equal(store.has(0), false);
      assert.equal(store.heldCount, 0);
      assert.equal(store.complete, false);
      // Bytes that do not match the manifest: the put waits for the store, then the store refuses them.
      let settled = false;
      const put = store.put(0, Buffer.alloc(65536)).finally(() => (settled = true));
      await new Promise((resolve) => setTimeout(resolve, 20));
      assert.equal(settled, false, 'put went ahead before the store was open');
      release();
      assert.equal(await put, 'corrupt');
      assert.equal(store.heldCount, 0);
      await (await opening).close();
    } finally {
      await dir.cleanup();
    }
  });

  it('rejects put with the error of a store that failed to open', async () => {
    const failure = new Error('no store here');
    const store = new OpeningStore(Promise.reject(failure));
    await assert.rejects(store.put(0, Buffer.alloc(1)), failure);
    assert.equal(store.has(0), false);
  });
});

describe('an agent joining with a fresh cache', () => {
  it('fails the join when the store cannot open, leaves no host registered, and joins once fixed', async () => {
    const scheduler = await startScheduler({ originReaders: 1 });
    const dir = await tempDir('fresh-join');
    const manifest = fakeManifest(4);
    const hex = manifestDigest(manifest).slice('sha256:'.length);
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: dir.path,
      port: 0,
      resume: false,
      name: 'fresh',
    });
    try {
      // A directory where the model's only data file belongs; no store state yet (a fresh cache).
      const blocker = join(dir.path, hex, 'files', 'w.bin');
      await mkdir(blocker, { recursive: true });
      await assert.rejects(agent.join({ source: 'http://127.0.0.1:9/', manifest }), { code: 'EISDIR' });
      const status = async (): Promise<number> => {
        const raw = await callJson(`${scheduler.url}/v1/swarms/${hex}`, 'the scheduler', { timeoutMs: 5000 });
        return parseMessage(swarmStatusSchema, raw, 'status').hosts.length;
      };
      // The early registration (if it got that far) was withdrawn with the failed join.
      const hostsAfterFailure = await status().catch((error: unknown) => {
        // No registration ever reached the scheduler: it does not know the model.
        assert.equal((error as { code?: string }).code, 'SWARM_UNKNOWN_MODEL');
        return 0;
      });
      assert.equal(hostsAfterFailure, 0);
      await rm(blocker, { recursive: true });
      const joined = await agent.join({ source: 'http://127.0.0.1:9/', manifest });
      assert.equal(joined.held, 0);
      for (let i = 0; i < 100 && (await status().catch(() => 0)) === 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(await status(), 1, 'the second join registered');
    } finally {
      await agent.close();
      await scheduler.close();
      await dir.cleanup();
    }
  });
});

describe('a ring parent whose store is still opening', () => {
  it('takes a subscription at once and pushes each piece once it is verified', async () => {
    const dir = await tempDir('opening-parent');
    const scheduler = await startScheduler({ originReaders: 1 });
    const { modelDir, manifest, hex } = await smallModelWithManifest(dir.path);
    const map = new PieceMap(manifest);
    let opened: () => void = () => undefined;
    const openStarted = new Promise<void>((resolve) => (opened = resolve));
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const parent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(dir.path, 'cache'),
      port: 0,
      resume: false,
      name: 'slow-disk',
      slowStoreOpen: () => {
        opened();
        return gate;
      },
    });
    let feed: RingFeed | undefined;
    try {
      const joining = parent.join({ source: modelDir, manifest });
      // The member starts (and registers) in the same turn as the store's open begins.
      await openStarted;
      const pieces = new Map<number, boolean>();
      let ended: unknown = 'open';
      let complete: () => void = () => undefined;
      const allPushed = new Promise<void>((resolve) => (complete = resolve));
      feed = new RingFeed({
        url: parent.url,
        model: hex,
        pieceCount: map.pieceCount,
        helloTimeoutMs: 5000,
        held: () => newBitfield(map.pieceCount),
        pieceLength: (piece) => map.pieceLength(piece),
        bufferFor: (_piece, length) => Buffer.alloc(length),
        onPiece: async (piece, bytes) => {
          pieces.set(piece, verifyPiece(bytes, map.locate(piece)));
          if (pieces.size === map.pieceCount) complete();
          await Promise.resolve();
        },
        onEnd: (error) => (ended = error),
      });
      // Before, the parent turned the HELLO away (SWARM_UNKNOWN_MODEL) and the child asked again
      // 100 ms later; now the subscription stands while the store opens.
      await sleep(300);
      assert.equal(ended, 'open', `the feed ended while the parent's store opened: ${String(ended)}`);
      assert.equal(pieces.size, 0, 'pieces were pushed before the store held any');
      release();
      await joining;
      await Promise.race([
        allPushed,
        sleep(20_000).then(() => assert.fail(`${pieces.size} of ${map.pieceCount} pieces pushed in 20 s`)),
      ]);
      assert.deepEqual(
        [...pieces.entries()].filter(([, good]) => !good),
        [],
        'a pushed piece does not match the manifest',
      );
    } finally {
      release();
      feed?.close();
      await parent.close();
      await scheduler.close();
      await dir.cleanup();
    }
  });
});
