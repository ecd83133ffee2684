/**
 * A restarted agent whose scheduler does not answer its registration (SIGSTOPped: the connection
 * is accepted, the request never answered) fetches from the peers it kept after REGISTRATION_SLOW_MS,
 * from peers only, and goes to the origin too only after the scheduler's silence limit. A real
 * session against a stand-in scheduler on a real socket that never answers; the policy's side is
 * pure (no origin read under a limit of 0).
 */

import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { encodeManifest, manifestDigest } from '../../src/manifest/manifest.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { SchedulerSession } from '../../src/swarm/agent/scheduler-session.js';
import { pickFallbackFetches } from '../../src/swarm/core/fallback.js';
import { Random } from '../../src/swarm/core/random.js';
import { emptyStore, fakeManifest, testIdentity } from '../helpers/swarm.js';

/** A scheduler that takes every request and answers none, until closed. */
async function silentScheduler(): Promise<{
  url: string;
  requests: () => number;
  close: () => Promise<void>;
}> {
  const waiting = new Set<IncomingMessage>();
  let requests = 0;
  const server: Server = createServer((req) => {
    requests++;
    waiting.add(req);
    req.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests: () => requests,
    close: async () => {
      for (const req of waiting) req.socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function until(check: () => boolean, ms: number): Promise<boolean> {
  for (const deadline = performance.now() + ms; performance.now() < deadline;) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return check();
}

function session(schedulerUrl: string, signal: AbortSignal, peers: readonly string[]): SchedulerSession {
  const manifest = fakeManifest(4);
  const store = emptyStore();
  return new SchedulerSession({
    model: manifestDigest(manifest).slice('sha256:'.length),
    map: new PieceMap(manifest),
    manifestBytes: encodeManifest(manifest),
    store,
    schedulerUrl,
    identity: testIdentity('a'),
    schedulerSilenceMs: 60_000,
    registrationSlowMs: 50,
    manifestInlineBytesMax: 1 << 20,
    signal,
    isRunning: () => true,
    onReply: () => undefined,
    onRegistered: () => undefined,
    onLost: () => undefined,
    onRefused: () => undefined,
    peers,
  });
}

describe('a registration the scheduler does not answer', () => {
  it('sends a host that kept peers to them (peers only), and one that kept none nowhere', async () => {
    const scheduler = await silentScheduler();
    const controller = new AbortController();
    const withPeers = session(scheduler.url, controller.signal, ['http://127.0.0.1:9']);
    const withoutPeers = session(scheduler.url, controller.signal, []);
    const running = [withPeers.run(), withoutPeers.run()].map((run) => run.catch(() => undefined));
    try {
      assert.ok(await until(() => scheduler.requests() === 2, 5000), 'both registrations arrived');
      assert.ok(
        await until(() => withPeers.registrationSlow, 5000),
        'the host with kept peers did not go to them',
      );
      // Slow is not silent: the origin stays the scheduler's to share out until the silence limit.
      assert.equal(withPeers.schedulerDown, false);
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(withoutPeers.registrationSlow, false, 'a host with no peers has nobody to go to');
      assert.equal(withoutPeers.schedulerDown, false);
    } finally {
      controller.abort();
      await scheduler.close();
      await Promise.all(running);
    }
  });

  it('peers only: no piece is read from the origin, whatever the peers lack', () => {
    const view = {
      pieceCount: 8,
      holds: () => false,
      fetching: () => false,
      urgent: new Set<number>(),
      peers: [{ peer: 'a', pieces: new Set([0, 1]) }],
      running: 0,
      originReads: 0,
    };
    const peersOnly = pickFallbackFetches(view, { downloadsMax: 4, originReadsMax: 0 }, new Random(7));
    assert.ok(peersOnly.length > 0, 'nothing fetched from the peer');
    assert.deepEqual(
      peersOnly.filter((pick) => pick.source.kind === 'origin'),
      [],
    );
    // The same view with origin reads allowed does read the pieces nobody holds from the origin.
    const withOrigin = pickFallbackFetches(view, { downloadsMax: 4, originReadsMax: 2 }, new Random(7));
    assert.ok(withOrigin.some((pick) => pick.source.kind === 'origin'));
  });
});
