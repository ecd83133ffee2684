import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { isWeightcastError } from '../../src/errors.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { PeerReader } from '../../src/swarm/agent/peer-reader.js';
import { PeerWireClient } from '../../src/swarm/agent/peer-wire-client.js';
import { PeerWireServer, type ServedModel } from '../../src/swarm/agent/peer-wire-server.js';
import { UploadSlots } from '../../src/swarm/agent/upload-slots.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import {
  FrameDecoder,
  REQUESTS_IN_FLIGHT_MAX,
  WireStatus,
  encodeHello,
  encodeRequest,
  encodeResponseHead,
  encodeSubscribe,
  modelDigestBytes,
  type PieceRequest,
} from '../../src/swarm/wire/peer-frames.js';
import { Throttle } from '../../src/util/throttle.js';
import { join } from 'node:path';
import { merkleRoot } from '../../src/manifest/merkle.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { PieceStore } from '../../src/piece/store.js';
import { pieceDigest } from '../../src/piece/verify.js';
import { PieceFetcher } from '../../src/swarm/agent/piece-fetcher.js';
import { captureWarnings, tempDir } from '../helpers/fixtures.js';
import { ASSIGNMENT_BYTES_MAX } from '../../src/swarm/wire/limits.js';
import { newBitfield } from '../../src/swarm/core/bitfield.js';

const MODEL = 'cd'.repeat(32);
const PIECE = 64 * 1024;
const PIECES = 8;
const DATA = randomBytes(PIECE * PIECES - 1000);

function pieceBytes(piece: number): Buffer {
  return DATA.subarray(piece * PIECE, Math.min(DATA.length, (piece + 1) * PIECE));
}

/** The model as one file of PIECES pieces; with `spans`, requests may run on into the next pieces. */
function servedModel(held: (piece: number) => boolean = () => true, spans = false): ServedModel {
  return {
    pieceCount: PIECES,
    pieceSize: PIECE,
    has: held,
    // One file of PIECES pieces; without `spans`, a range must stay inside its piece.
    piecesUnder: (piece, offset, length) => {
      const start = piece * PIECE + offset;
      const end = start + length;
      if (end > (spans ? DATA.length : piece * PIECE + pieceBytes(piece).length)) return undefined;
      const pieces: number[] = [];
      for (let p = Math.floor(start / PIECE); p * PIECE < end; p++) pieces.push(p);
      return pieces;
    },
    read: async (piece, offset, target) => {
      await sleep(0);
      DATA.copy(target, 0, piece * PIECE + offset, piece * PIECE + offset + target.length);
    },
  };
}

/** A model of one piece of `size` bytes, all held. */
function onePieceModel(size: number, parts: Pick<ServedModel, 'read' | 'borrow'>): ServedModel {
  return {
    pieceCount: 1,
    pieceSize: size,
    piecesUnder: (_piece, offset, length) => (offset + length <= size ? [0] : undefined),
    has: () => true,
    ...parts,
  };
}

interface Listening {
  url: string;
  close: () => Promise<void>;
}

/** An HTTP server whose upgrades go to a PeerWireServer, as on an agent. */
async function wireAgent(
  options: { uploads?: number; held?: (piece: number) => boolean; spans?: boolean } = {},
): Promise<Listening & { wire: PeerWireServer }> {
  const wire = new PeerWireServer({
    model: (hex) => (hex === MODEL ? servedModel(options.held, options.spans) : undefined),
    uploads: new UploadSlots(options.uploads ?? 4),
    throttle: new Throttle(undefined),
  });
  const server = createHttpServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket: Socket, head: Buffer) => {
    if (PeerWireServer.wants(req)) wire.accept(socket, head);
    else socket.destroy();
  });
  return { ...(await listen(server)), wire };
}

async function listen(server: Server | HttpServer): Promise<Listening> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      if ('closeAllConnections' in server) server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface FakePeer {
  socket: Socket;
  requests: PieceRequest[];
  cancels: number[];
  /** Resolves when the client has sent `count` requests in all. */
  requested: (count: number) => Promise<void>;
}

/**
 * A peer scripted by the test: it answers the upgrade and the HELLO, then hands every connection to
 * `script`, which writes whatever it likes.
 */
async function fakePeer(
  script: (peer: FakePeer) => void,
): Promise<Listening & { connections: () => number }> {
  const sockets = new Set<Socket>();
  let connections = 0;
  const server = createServer((socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    const decoder = new FrameDecoder('server');
    const peer: FakePeer = { socket, requests: [], cancels: [], requested: () => Promise.resolve() };
    const waiters: Array<{ count: number; resolve: () => void }> = [];
    peer.requested = (count) =>
      new Promise<void>((resolve) => {
        if (peer.requests.length >= count) resolve();
        else waiters.push({ count, resolve });
      });
    let head = '';
    let upgraded = false;
    socket.on('data', (chunk: Buffer) => {
      let rest = chunk;
      if (!upgraded) {
        head += chunk.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end === -1) return;
        rest = Buffer.from(head.slice(end + 4), 'latin1');
        upgraded = true;
        socket.write(
          'HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: weightcast-peer\r\n\r\n',
        );
      }
      for (const event of decoder.push(rest)) {
        if (event.type === 'hello') {
          socket.write(encodeHello({ version: 1, model: event.hello.model, credential: new Uint8Array() }));
          script(peer);
        } else if (event.type === 'request') {
          peer.requests.push(event.request);
          for (const waiter of waiters.filter((w) => peer.requests.length >= w.count)) waiter.resolve();
        } else if (event.type === 'cancel') {
          peer.cancels.push(event.requestId);
        }
      }
    });
  });
  const listening = await listen(server);
  return {
    url: listening.url,
    connections: () => connections,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await listening.close();
    },
  };
}

/** A bare TCP connection to an agent's port, for a test that writes the wire by hand; kept in `sockets`. */
async function rawConnection(url: string, sockets: Socket[]): Promise<Socket> {
  const { port } = new URL(url);
  const socket = await new Promise<Socket>((resolve) => {
    const created: Socket = connect(Number(port), '127.0.0.1', () => resolve(created));
  });
  sockets.push(socket);
  socket.on('error', () => undefined);
  return socket;
}

function client(url: string, idleTimeoutMs = 2000, pipeline = 4): PeerWireClient {
  return new PeerWireClient({ url, model: MODEL, idleTimeoutMs, pipeline });
}

describe('peer wire over real sockets', () => {
  it('reads pipelined pieces straight into the caller buffers, with progress', async () => {
    const agent = await wireAgent();
    const wire = client(agent.url);
    try {
      const reads = Array.from({ length: PIECES }, (_, piece) => {
        const target = Buffer.alloc(pieceBytes(piece).length);
        const progress: { filled: number; firstByteMs?: number; onFirstByte?: () => void } = { filled: 0 };
        let firstCalls = 0;
        progress.onFirstByte = () => (firstCalls += 1);
        return wire
          .read(piece, 0, target, { progress })
          .then(() => ({ piece, target, progress, firstCalls }));
      });
      for (const { piece, target, progress, firstCalls } of await Promise.all(reads)) {
        assert.ok(target.equals(pieceBytes(piece)), `piece ${piece}`);
        assert.equal(progress.filled, target.length);
        assert.equal(typeof progress.firstByteMs, 'number');
        assert.equal(firstCalls, 1);
      }
      // A part of a piece.
      const part = Buffer.alloc(100);
      await wire.read(3, 500, part);
      assert.ok(part.equals(pieceBytes(3).subarray(500, 600)));
    } finally {
      await wire.close();
      agent.wire.close();
      await agent.close();
    }
  });

  it('answers busy, not held and bad requests as typed errors, and keeps the connection', async () => {
    const busy = await wireAgent({ uploads: 0 });
    const holey = await wireAgent({ held: (piece) => piece !== 2 });
    const busyClient = client(busy.url);
    const holeyClient = client(holey.url);
    try {
      await assert.rejects(busyClient.read(0, 0, Buffer.alloc(10)), { code: 'SWARM_BUSY' });
      await assert.rejects(holeyClient.read(2, 0, Buffer.alloc(10)), { code: 'SWARM_PIECE_NOT_HELD' });
      await assert.rejects(holeyClient.read(1, PIECE - 5, Buffer.alloc(10)), { code: 'SWARM_PROTOCOL' });
      await assert.rejects(holeyClient.read(PIECES + 3, 0, Buffer.alloc(10)), { code: 'SWARM_PROTOCOL' });
      const target = Buffer.alloc(pieceBytes(1).length);
      await holeyClient.read(1, 0, target);
      assert.ok(target.equals(pieceBytes(1)));
    } finally {
      await Promise.all([busyClient.close(), holeyClient.close()]);
      busy.wire.close();
      holey.wire.close();
      await Promise.all([busy.close(), holey.close()]);
    }
  });

  it('tells the fallback a fetch the peer turned away as busy from other failures', async () => {
    const busy = await wireAgent({ uploads: 0 });
    const holey = await wireAgent({ held: (piece) => piece !== 2 });
    const work = await tempDir('peer-wire-busy');
    const pieces = Array.from({ length: PIECES }, (_, piece) => pieceDigest(pieceBytes(piece)));
    const map = new PieceMap({
      pieceSize: PIECE,
      files: [{ path: 'model.safetensors', size: DATA.length, merkleRoot: merkleRoot(pieces), pieces }],
    });
    const store = await PieceStore.open(map, { dataDir: join(work.path, 'data'), stateDir: work.path });
    const origin = new LocalOrigin(work.path);
    const fetcher = new PieceFetcher({
      model: MODEL,
      map,
      store,
      origin,
      downloadThrottle: new Throttle(undefined),
      peerIdleTimeoutMs: 5000,
      peerWire: true,
      onStoreFailure: (error) => assert.fail(error),
    });
    const signal = AbortSignal.timeout(10_000);
    try {
      const turnedAway = await fetcher.fetch(fetcher.newFetch(0, new AbortController()), busy.url, signal);
      assert.deepEqual(turnedAway, { outcome: 'failed', busy: true });
      const notHeld = await fetcher.fetch(fetcher.newFetch(2, new AbortController()), holey.url, signal);
      assert.deepEqual(notHeld, { outcome: 'failed' });
      const fetched = await fetcher.fetch(fetcher.newFetch(1, new AbortController()), holey.url, signal);
      assert.equal(fetched.outcome, 'verified');
      assert.equal(store.has(1), true);
    } finally {
      await fetcher.close();
      await Promise.allSettled([store.close(), origin.close()]);
      busy.wire.close();
      holey.wire.close();
      await Promise.all([busy.close(), holey.close()]);
      await work.cleanup();
    }
  });

  it('serves a range running on through the next held pieces of the file (a transfer unit), and no further', async () => {
    const agent = await wireAgent({ held: (piece) => piece !== 5, spans: true });
    const wire = client(agent.url);
    try {
      const unit = Buffer.alloc(3 * PIECE);
      await wire.read(1, 0, unit);
      assert.ok(unit.equals(DATA.subarray(PIECE, 4 * PIECE)));
      const across = Buffer.alloc(PIECE);
      await wire.read(2, 100, across);
      assert.ok(across.equals(DATA.subarray(2 * PIECE + 100, 3 * PIECE + 100)));
      // Through a piece it does not hold, past the file's end, longer than a request may be.
      await assert.rejects(wire.read(4, 0, Buffer.alloc(2 * PIECE)), { code: 'SWARM_PIECE_NOT_HELD' });
      await assert.rejects(wire.read(6, 0, Buffer.alloc(2 * PIECE + 10)), { code: 'SWARM_PROTOCOL' });
      await assert.rejects(wire.read(0, 0, Buffer.alloc(ASSIGNMENT_BYTES_MAX + 1)), {
        code: 'SWARM_PROTOCOL',
      });
      const last = Buffer.alloc(PIECE + pieceBytes(7).length);
      await wire.read(6, 0, last);
      assert.ok(last.equals(DATA.subarray(6 * PIECE)));
    } finally {
      await wire.close();
      agent.wire.close();
      await agent.close();
    }
  });

  it('fails reads for a model the peer has not joined', async () => {
    const agent = await wireAgent();
    const other = new PeerWireClient({ url: agent.url, model: 'ef'.repeat(32), idleTimeoutMs: 2000 });
    try {
      await assert.rejects(other.read(0, 0, Buffer.alloc(10)), { code: 'SWARM_UNKNOWN_MODEL' });
    } finally {
      await other.close();
      agent.wire.close();
      await agent.close();
    }
  });

  it('fails a peer that stalls mid-piece within the idle timeout, and the next read reconnects', async () => {
    const peer = await fakePeer((fake) => {
      void fake.requested(1).then(() => {
        const request = fake.requests[0] as PieceRequest;
        fake.socket.write(encodeResponseHead(request.requestId, WireStatus.ok, request.length));
        fake.socket.write(Buffer.alloc(request.length >> 1, 1));
        // ...and nothing more.
      });
    });
    const wire = client(peer.url, 300);
    try {
      const started = performance.now();
      const progress = { filled: 0 };
      await assert.rejects(wire.read(0, 0, Buffer.alloc(1000), { progress }), { code: 'ORIGIN_TIMEOUT' });
      const tookMs = performance.now() - started;
      assert.ok(tookMs >= 250 && tookMs < 2000, `took ${tookMs} ms`);
      assert.equal(progress.filled, 500);
      await assert.rejects(wire.read(0, 0, Buffer.alloc(1000)), { code: 'ORIGIN_TIMEOUT' });
      assert.equal(peer.connections(), 2);
    } finally {
      await wire.close();
      await peer.close();
    }
  });

  it('fails the piece under way when the peer disconnects mid-piece, and sends unanswered ones again', async () => {
    let connection = 0;
    const peer = await fakePeer((fake) => {
      connection += 1;
      if (connection === 1) {
        void fake.requested(2).then(() => {
          const first = fake.requests[0] as PieceRequest;
          fake.socket.write(encodeResponseHead(first.requestId, WireStatus.ok, first.length));
          fake.socket.end(Buffer.alloc(10, 1));
        });
        return;
      }
      void fake.requested(1).then(() => {
        const request = fake.requests[0] as PieceRequest;
        fake.socket.write(encodeResponseHead(request.requestId, WireStatus.ok, request.length));
        fake.socket.write(Buffer.alloc(request.length, 7));
      });
    });
    const wire = client(peer.url);
    try {
      const first = wire.read(0, 0, Buffer.alloc(1000));
      const secondTarget = Buffer.alloc(1000);
      const second = wire.read(1, 0, secondTarget);
      await assert.rejects(first, { code: 'ORIGIN_IO' });
      await second;
      assert.ok(secondTarget.equals(Buffer.alloc(1000, 7)));
    } finally {
      await wire.close();
      await peer.close();
    }
  });

  it('fails the reads under way at once when the peer hangs up inside a frame head', async () => {
    const peer = await fakePeer((fake) => {
      void fake.requested(2).then(() => {
        const first = fake.requests[0] as PieceRequest;
        const head = encodeResponseHead(first.requestId, WireStatus.ok, first.length);
        fake.socket.end(head.subarray(0, head.length >> 1));
      });
    });
    const wire = client(peer.url, 10_000);
    try {
      const started = performance.now();
      const reads = [wire.read(0, 0, Buffer.alloc(1000)), wire.read(1, 0, Buffer.alloc(1000))];
      const outcomes = await Promise.allSettled(reads);
      // Not the idle timeout (10 s): each hang-up ends the connection at once; the unanswered
      // requests go again on a fresh one once (RESENDS_MAX), then fail as a typed error.
      assert.ok(performance.now() - started < 5000, `took ${performance.now() - started} ms`);
      for (const outcome of outcomes) {
        assert.equal(outcome.status, 'rejected');
        assert.equal((outcome.reason as { code?: string }).code, 'ORIGIN_IO');
      }
      assert.equal(peer.connections(), 2);
    } finally {
      await wire.close();
      await peer.close();
    }
  });

  it('cancels: a waiting request by a CANCEL frame, a request whose bytes are arriving by closing, and never writes into a buffer given back', async () => {
    let connection = 0;
    let firstPeer: FakePeer | undefined;
    const peer = await fakePeer((fake) => {
      connection += 1;
      if (connection === 1) firstPeer = fake;
      else {
        // The second connection answers everything whole.
        void (async () => {
          for (let answered = 0; ; answered++) {
            await fake.requested(answered + 1);
            const request = fake.requests[answered] as PieceRequest;
            fake.socket.write(encodeResponseHead(request.requestId, WireStatus.ok, request.length));
            fake.socket.write(Buffer.alloc(request.length, 9));
          }
        })();
      }
    });
    const wire = client(peer.url);
    try {
      const receiving = new AbortController();
      const waiting = new AbortController();
      const targetA = Buffer.alloc(1000, 0xee);
      const targetB = Buffer.alloc(1000, 0xee);
      const targetC = Buffer.alloc(1000);
      const a = wire.read(0, 0, targetA, { signal: receiving.signal });
      const b = wire.read(1, 0, targetB, { signal: waiting.signal });
      const c = wire.read(2, 0, targetC);
      while (firstPeer === undefined) await sleep(5);
      const fake = firstPeer;
      await fake.requested(3);
      // B waits behind A at the peer: cancelled by a frame, rejected at once.
      waiting.abort();
      await assert.rejects(b, { code: 'ABORTED' });
      while (fake.cancels.length === 0) await sleep(5);
      assert.deepEqual(fake.cancels, [fake.requests[1]?.requestId]);
      // A's bytes start arriving; then A is cancelled: the connection goes, C goes again.
      const requestA = fake.requests[0] as PieceRequest;
      fake.socket.write(encodeResponseHead(requestA.requestId, WireStatus.ok, 1000));
      fake.socket.write(Buffer.alloc(100, 1));
      while (targetA[99] !== 1) await sleep(5);
      receiving.abort();
      await assert.rejects(a, { code: 'ABORTED' });
      fake.socket.write(Buffer.alloc(900, 2));
      await c;
      assert.ok(targetC.equals(Buffer.alloc(1000, 9)));
      assert.ok(targetA.subarray(100).equals(Buffer.alloc(900, 0xee)), 'bytes landed after the abort');
      assert.ok(targetB.equals(Buffer.alloc(1000, 0xee)));
      assert.equal(peer.connections(), 2);
    } finally {
      await wire.close();
      await peer.close();
    }
  });

  it('drops the rest of a cancelled response that had started at the peer but not yet here', async () => {
    const peer = await fakePeer((fake) => {
      void (async () => {
        await fake.requested(2);
        while (fake.cancels.length === 0) await sleep(5);
        // The peer had already started sending the cancelled one: it goes whole, then the other.
        for (const request of fake.requests) {
          fake.socket.write(encodeResponseHead(request.requestId, WireStatus.ok, request.length));
          fake.socket.write(Buffer.alloc(request.length, request.piece + 1));
        }
      })();
    });
    const wire = client(peer.url);
    try {
      const controller = new AbortController();
      const cancelledTarget = Buffer.alloc(200_000);
      const cancelled = wire.read(0, 0, cancelledTarget, { signal: controller.signal });
      const kept = Buffer.alloc(1000);
      const other = wire.read(1, 0, kept);
      await sleep(50);
      controller.abort();
      await assert.rejects(cancelled, { code: 'ABORTED' });
      await other;
      assert.ok(kept.equals(Buffer.alloc(1000, 2)));
      assert.ok(cancelledTarget.equals(Buffer.alloc(200_000)));
      assert.equal(peer.connections(), 1);
    } finally {
      await wire.close();
      await peer.close();
    }
  });

  it('turns wrong lengths and garbage from a peer into SWARM_PROTOCOL', async () => {
    const peer = await fakePeer((fake) => {
      void fake.requested(1).then(() => {
        const request = fake.requests[0] as PieceRequest;
        fake.socket.write(encodeResponseHead(request.requestId, WireStatus.ok, request.length + 1));
      });
    });
    const garbage = await fakePeer((fake) => {
      void fake.requested(1).then(() => fake.socket.write(Buffer.from('HTTP/1.1 200 OK\r\n\r\n')));
    });
    const wrong = client(peer.url);
    const noise = client(garbage.url);
    try {
      await assert.rejects(wrong.read(0, 0, Buffer.alloc(10)), { code: 'SWARM_PROTOCOL' });
      await assert.rejects(noise.read(0, 0, Buffer.alloc(10)), { code: 'SWARM_PROTOCOL' });
    } finally {
      await Promise.all([wrong.close(), noise.close()]);
      await Promise.all([peer.close(), garbage.close()]);
    }
  });

  it('marks a peer that refuses the upgrade, and PeerReader falls back to its HTTP ranges', async () => {
    const manifest = {
      version: 1,
      pieceSize: PIECE,
      files: [
        { path: 'w.bin', size: DATA.length, pieces: Array.from({ length: PIECES }, () => '0'.repeat(64)) },
      ],
    } as unknown as Manifest;
    const server = createHttpServer((req, res) => {
      const match = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
      if (req.url !== `/v1/models/${MODEL}/files/w.bin` || match === null)
        return void res.writeHead(404).end();
      const start = Number(match[1]);
      const end = Number(match[2]) + 1;
      res.writeHead(206, {
        'content-length': end - start,
        'content-range': `bytes ${start}-${end - 1}/${DATA.length}`,
      });
      res.end(DATA.subarray(start, end));
    });
    const old = await listen(server);
    const wire = client(old.url);
    const map = new PieceMap(manifest);
    const reader = new PeerReader({
      url: old.url,
      model: MODEL,
      map,
      fileIndex: new Map([['w.bin', 0]]),
      idleTimeoutMs: 2000,
      wire: true,
    });
    try {
      const error = await wire.read(0, 0, Buffer.alloc(10)).catch((caught: unknown) => caught);
      assert.ok(isWeightcastError(error, 'SWARM_PROTOCOL') && error.details['wireRefused'] === true);
      assert.equal(wire.refused, true);
      const target = Buffer.alloc(1000);
      await reader.readInto('w.bin', PIECE * 2 + 10, target);
      assert.ok(target.equals(DATA.subarray(PIECE * 2 + 10, PIECE * 2 + 1010)));
    } finally {
      await Promise.all([wire.close(), reader.close()]);
      await old.close();
    }
  });

  it('serves only within its limits: too many requests in flight or garbage close the connection', async () => {
    const agent = await wireAgent();
    const sockets: Socket[] = [];
    const open = async (): Promise<Socket> => {
      const socket = await rawConnection(agent.url, sockets);
      socket.write(
        `GET /v1/peer-wire HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: weightcast-peer\r\n\r\n`,
      );
      socket.write(encodeHello({ version: 1, model: modelDigestBytes(MODEL), credential: new Uint8Array() }));
      return socket;
    };
    const closed = (socket: Socket): Promise<Buffer> =>
      new Promise((resolve) => {
        const chunks: Buffer[] = [];
        socket.on('data', (chunk: Buffer) => chunks.push(chunk));
        socket.on('close', () => resolve(Buffer.concat(chunks)));
      });
    try {
      const flood = await open();
      const floodClosed = closed(flood);
      for (let i = 0; i <= REQUESTS_IN_FLIGHT_MAX + 4; i++) {
        flood.write(encodeRequest({ requestId: i + 1, piece: 0, offset: 0, length: PIECE }));
      }
      const floodBytes = await floodClosed;
      assert.ok(floodBytes.includes(Buffer.from('requests in flight')));
      const noisy = await open();
      const noisyClosed = closed(noisy);
      noisy.write(Buffer.alloc(64, 0xff));
      assert.ok((await noisyClosed).includes(Buffer.from('peer wire:')));
    } finally {
      for (const socket of sockets) socket.destroy();
      agent.wire.close();
      await agent.close();
    }
  });

  it('ignores what follows a HELLO it turned away, however it arrives (one write), and serves others on', async () => {
    const agent = await wireAgent();
    const sockets: Socket[] = [];
    // Upgrade, a HELLO the agent refuses (a model it has not joined), and more frames, in one write.
    const turnedAway = async (after: Buffer): Promise<Buffer> => {
      const socket = await rawConnection(agent.url, sockets);
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      socket.end(
        Buffer.concat([
          Buffer.from(
            `GET /v1/peer-wire HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: weightcast-peer\r\n\r\n`,
          ),
          encodeHello({ version: 1, model: modelDigestBytes('ab'.repeat(32)), credential: new Uint8Array() }),
          after,
        ]),
      );
      await closed;
      return Buffer.concat(chunks);
    };
    try {
      const request = encodeRequest({ requestId: 1, piece: 0, offset: 0, length: PIECE });
      const subscribe = encodeSubscribe(newBitfield(PIECES), PIECES);
      for (const after of [request, subscribe, Buffer.concat([subscribe, request])]) {
        const answer = await turnedAway(after);
        assert.ok(answer.includes(Buffer.from('has not joined model')), answer.toString('latin1'));
        // No piece bytes went to a caller the agent turned away.
        assert.equal(answer.includes(pieceBytes(0).subarray(0, 64)), false);
      }
      // The agent is alive and serves a caller with the right HELLO.
      const reader = client(agent.url);
      try {
        const target = Buffer.alloc(PIECE);
        await reader.read(0, 0, target);
        assert.ok(target.equals(pieceBytes(0)));
      } finally {
        await reader.close();
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      agent.wire.close();
      await agent.close();
    }
  });

  it('a fault of its own while taking a response fails that read (retryable) with a warning; the next read works', async () => {
    const agent = await wireAgent();
    const warnings = captureWarnings();
    const reader = client(agent.url);
    try {
      const progress = {
        filled: 0,
        onFirstByte: () => {
          throw new TypeError('a fault in the reader');
        },
      };
      await assert.rejects(reader.read(1, 0, Buffer.alloc(PIECE), { progress }), (error: unknown) => {
        assert.ok(isWeightcastError(error, 'ORIGIN_IO'), String(error));
        assert.equal(error.details['retryable'], true);
        return true;
      });
      await sleep(0);
      assert.ok(
        warnings.messages.some((text) => text.includes('a fault in the reader')),
        warnings.messages.join(' | '),
      );
      const target = Buffer.alloc(PIECE);
      await reader.read(2, 0, target);
      assert.ok(target.equals(pieceBytes(2)));
    } finally {
      warnings.stop();
      await reader.close();
      agent.wire.close();
      await agent.close();
    }
  });

  it('frees the slot of a peer that stops reading, and closes a connection that never says hello', async () => {
    const big = 16 * 1024 * 1024;
    const wire = new PeerWireServer({
      model: () =>
        onePieceModel(big, { read: (_piece, _offset, target) => Promise.resolve(void target.fill(3)) }),
      uploads: new UploadSlots(1),
      throttle: new Throttle(undefined),
      idleTimeoutMs: 300,
      helloTimeoutMs: 300,
    });
    const server = createHttpServer((_req, res) => res.writeHead(404).end());
    server.on('upgrade', (_req, socket: Socket, head: Buffer) => wire.accept(socket, head));
    const agent = await listen(server);
    const { port } = new URL(agent.url);
    const raw = (): Socket => {
      const socket = connect(Number(port), '127.0.0.1');
      socket.on('error', () => undefined);
      socket.write(
        'GET /v1/peer-wire HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: weightcast-peer\r\n\r\n',
      );
      return socket;
    };
    const stalled = raw();
    const silent = raw();
    silent.resume();
    const reader = new PeerWireClient({ url: agent.url, model: MODEL, idleTimeoutMs: 5000 });
    try {
      // A peer asks for 16 MiB and never reads: it holds the only slot until the idle timeout.
      stalled.pause();
      stalled.write(
        encodeHello({ version: 1, model: modelDigestBytes(MODEL), credential: new Uint8Array() }),
      );
      stalled.write(encodeRequest({ requestId: 1, piece: 0, offset: 0, length: big }));
      await sleep(100);
      await assert.rejects(reader.read(0, 0, Buffer.alloc(10)), { code: 'SWARM_BUSY' });
      const silentClosed = new Promise<void>((resolve) => silent.once('close', () => resolve()));
      // Once the idle timeout ended the stalled write, the slot is free again.
      const target = Buffer.alloc(1000);
      const deadline = performance.now() + 3000;
      for (;;) {
        const busy = await reader.read(0, 0, target).then(
          () => false,
          (error: unknown) => isWeightcastError(error, 'SWARM_BUSY'),
        );
        if (!busy) break;
        assert.ok(performance.now() < deadline, 'the stalled peer kept its slot');
        await sleep(50);
      }
      assert.ok(target.equals(Buffer.alloc(1000, 3)));
      await silentClosed;
    } finally {
      stalled.destroy();
      silent.destroy();
      await reader.close();
      wire.close();
      await agent.close();
    }
  });

  it('serves lent pieces from memory without reading them, and gives each view back, taken or not', async () => {
    const releases: boolean[] = [];
    let reads = 0;
    const memory = Buffer.from(DATA);
    const lend = (bytes: Buffer): { bytes: Buffer; release: (taken: boolean) => void } => ({
      bytes,
      release: (taken) => void releases.push(taken),
    });
    // Pieces 0-3 are in memory.
    const fast = new PeerWireServer({
      model: () => ({
        ...servedModel(),
        read: async (piece, offset, target) => {
          reads++;
          await sleep(0);
          DATA.copy(target, 0, piece * PIECE + offset, piece * PIECE + offset + target.length);
        },
        borrow: (piece, offset, length) =>
          piece < 4
            ? lend(memory.subarray(piece * PIECE + offset, piece * PIECE + offset + length))
            : undefined,
      }),
      uploads: new UploadSlots(2),
      throttle: new Throttle(undefined),
    });
    // One 4 MiB piece in memory, sent at 1 MB/s: the reader leaves long before its end.
    const big = 4 * 1024 * 1024;
    const slow = new PeerWireServer({
      model: () =>
        onePieceModel(big, {
          read: () => Promise.reject(new Error('read from disk')),
          borrow: (_piece, offset, length) => lend(Buffer.alloc(big, 7).subarray(offset, offset + length)),
        }),
      uploads: new UploadSlots(1),
      throttle: new Throttle(1_000_000),
    });
    const servers = [fast, slow].map((wire) => {
      const server = createHttpServer((_req, res) => res.writeHead(404).end());
      server.on('upgrade', (_req, socket: Socket, head: Buffer) => wire.accept(socket, head));
      return listen(server);
    });
    const [fastAgent, slowAgent] = (await Promise.all(servers)) as [Listening, Listening];
    const reader = client(fastAgent.url);
    const leaving = client(slowAgent.url);
    try {
      for (let piece = 0; piece < PIECES; piece++) {
        const target = Buffer.alloc(pieceBytes(piece).length);
        await reader.read(piece, 0, target);
        assert.ok(target.equals(pieceBytes(piece)), `piece ${piece}`);
      }
      assert.equal(reads, PIECES - 4, 'pieces in memory are not read');
      assert.deepEqual(releases, [true, true, true, true]);
      // The reader of the big piece gives up: the view comes back as not taken (the stream may
      // still refer to it), so its buffer is never reused.
      const controller = new AbortController();
      const read = leaving.read(0, 0, Buffer.alloc(big), { signal: controller.signal });
      await sleep(300);
      controller.abort();
      await assert.rejects(read);
      const deadline = performance.now() + 5000;
      while (releases.length < 5) {
        assert.ok(performance.now() < deadline, 'the abandoned upload never gave its view back');
        await sleep(50);
      }
      assert.deepEqual(releases, [true, true, true, true, false]);
    } finally {
      await Promise.all([reader.close(), leaving.close()]);
      fast.close();
      slow.close();
      await Promise.all([fastAgent.close(), slowAgent.close()]);
    }
  });
});
