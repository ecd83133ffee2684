/**
 * Reports that free nothing wait for a frame to ride on (SchedulerSession.report, REPORT_DEFER_MS):
 * a real session against a stand-in scheduler on a real socket, which records every sync frame. A
 * deferrable report goes out with the next frame the session sends anyway, or alone once the
 * deferral ran out; a plain report goes out at once.
 */

import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { describe, it } from 'node:test';
import { encodeManifest, manifestDigest } from '../../src/manifest/manifest.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { REPORT_DEFER_MS, SchedulerSession } from '../../src/swarm/agent/scheduler-session.js';
import { FrameReader } from '../../src/swarm/wire/sync-channel.js';
import { emptyStore, fakeManifest, testIdentity } from '../helpers/swarm.js';

interface Received {
  atMs: number;
  frame: { reports?: Array<{ transferId: number }> };
}

/** A scheduler stand-in: registers anyone as host 3 and records the frames of its channel. */
async function standIn(): Promise<{ url: string; frames: Received[]; close: () => Promise<void> }> {
  const frames: Received[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ host: 3, pieceCount: 4, hostTimeoutMs: 10_000 }));
    });
  });
  server.on('upgrade', (_req: IncomingMessage, socket: Socket) => {
    sockets.add(socket);
    socket.write(
      'HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: weightcast-sync\r\n\r\n',
    );
    const reader = new FrameReader();
    socket.on('data', (chunk: Buffer) => {
      for (const frame of reader.push(chunk))
        frames.push({ atMs: performance.now(), frame: frame as Received['frame'] });
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    frames,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function until(check: () => boolean, ms: number): Promise<void> {
  for (const deadline = performance.now() + ms; performance.now() < deadline;) {
    if (check()) return;
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  assert.ok(check(), `not within ${ms} ms`);
}

const idsOf = (received: Received | undefined): number[] =>
  (received?.frame.reports ?? []).map((report) => report.transferId).sort((a, b) => a - b);

describe('deferred reports', () => {
  it('ride on the next frame, or go alone once the deferral runs out; plain reports go at once', async () => {
    const scheduler = await standIn();
    const controller = new AbortController();
    const manifest = fakeManifest(4);
    const store = emptyStore();
    const session = new SchedulerSession({
      model: manifestDigest(manifest).slice('sha256:'.length),
      map: new PieceMap(manifest),
      manifestBytes: encodeManifest(manifest),
      store,
      schedulerUrl: scheduler.url,
      identity: testIdentity('a'),
      schedulerSilenceMs: 60_000,
      manifestInlineBytesMax: 1 << 20,
      signal: controller.signal,
      isRunning: () => true,
      onReply: () => undefined,
      onRegistered: () => undefined,
      onLost: () => undefined,
      onRefused: () => undefined,
    });
    const running = session.run();
    try {
      // The channel's first frame: the empty sync it opens with.
      await until(() => scheduler.frames.length === 1, 5000);

      session.report({ transferId: 1, outcome: 'verified' }, true);
      await new Promise((resolve) => setTimeout(resolve, 5));
      assert.equal(scheduler.frames.length, 1, 'a deferrable report waits');
      session.report({ transferId: 2, outcome: 'verified' });
      await until(() => scheduler.frames.length === 2, 5000);
      assert.deepEqual(idsOf(scheduler.frames[1]), [1, 2], 'it rides on the next frame');

      const deferredAt = performance.now();
      session.report({ transferId: 3, outcome: 'verified' }, true);
      await until(() => scheduler.frames.length === 3, 5000);
      assert.deepEqual(idsOf(scheduler.frames[2]), [3]);
      assert.ok(
        scheduler.frames[2]!.atMs - deferredAt >= REPORT_DEFER_MS - 1,
        `alone, it went after ${scheduler.frames[2]!.atMs - deferredAt} ms`,
      );

      // A plain report goes on the next microtask: a deferrable one made a moment later does not
      // find it still waiting (it would if the plain one had been held too).
      session.report({ transferId: 4, outcome: 'failed' });
      await new Promise((resolve) => setImmediate(resolve));
      session.report({ transferId: 5, outcome: 'verified' }, true);
      await until(() => scheduler.frames.length === 5, 5000);
      assert.deepEqual(idsOf(scheduler.frames[3]), [4], 'a plain report is not held');
      assert.deepEqual(idsOf(scheduler.frames[4]), [5]);
    } finally {
      controller.abort();
      await scheduler.close();
      await running;
    }
  });
});
