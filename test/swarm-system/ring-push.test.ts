/**
 * Ring pushes over real sockets on loopback: a PeerWireServer as a ring parent (ring-push-session.ts)
 * and a RingFeed as its child (ring-feed.ts). What is pushed and in what order, HAVEs, a parent that
 * verifies more, a model that does not push, a corrupt parent, a child that stops reading, a lying
 * or silent parent, a SUBSCRIBE that breaks the rules, and closing.
 */

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { WeightcastError } from '../../src/errors.js';
import { newBitfield, setBit } from '../../src/swarm/core/bitfield.js';
import { PeerWireServer, type ServedModel } from '../../src/swarm/agent/peer-wire-server.js';
import { RingFeed, type RingFeedOptions } from '../../src/swarm/agent/ring-feed.js';
import type { RingArrivingListener } from '../../src/swarm/agent/member.js';
import { UploadSlots } from '../../src/swarm/agent/upload-slots.js';
import {
  FrameDecoder,
  WireStatus,
  encodeHello,
  encodePushHead,
  encodeRequest,
  encodeSubscribe,
  modelDigestBytes,
  type WireEvent,
} from '../../src/swarm/wire/peer-frames.js';
import { Throttle } from '../../src/util/throttle.js';
import { captureWarnings } from '../helpers/fixtures.js';

const MODEL = 'ef'.repeat(32);
// 16 MiB in all: more than loopback's socket buffers hold, so a child that stops reading stops a push.
const PIECE = 256 * 1024;
const PIECES = 64;
const DATA = randomBytes(PIECE * PIECES - 777);
const length = (piece: number): number => Math.min(PIECE, DATA.length - piece * PIECE);
const bytesOf = (piece: number): Buffer => DATA.subarray(piece * PIECE, piece * PIECE + length(piece));
const digest = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

/** A parent's model: `held` pieces, more as the test verifies them (`verify`). */
class ParentModel {
  readonly held = new Set<number>();
  private readonly listeners = new Set<(piece: number) => void>();
  /** Cut-through listeners (a push session passing on pieces as they arrive here). */
  readonly arriving = new Set<RingArrivingListener>();
  constructor(held: number[]) {
    for (const piece of held) this.held.add(piece);
  }
  verify(piece: number): void {
    this.held.add(piece);
    for (const listener of this.listeners) listener(piece);
  }
  get watchers(): number {
    return this.listeners.size;
  }
  served(ring: boolean): ServedModel {
    return {
      pieceCount: PIECES,
      pieceSize: PIECE,
      has: (piece) => this.held.has(piece),
      piecesUnder: (piece) => [piece],
      read: async (piece, offset, target) => {
        await sleep(0);
        bytesOf(piece).copy(target, 0, offset, offset + target.length);
      },
      ...(ring
        ? {
            ring: {
              heldBitfield: () => bits([...this.held]),
              watchVerified: (listener) => {
                this.listeners.add(listener);
                return () => this.listeners.delete(listener);
              },
              pieceLength: length,
              watchArriving: (listener) => {
                this.arriving.add(listener);
                return () => this.arriving.delete(listener);
              },
            },
          }
        : {}),
    };
  }
}

/** `promise`, or a failure naming `what` after `ms`: no test waits for ever. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`waited ${ms} ms for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function bits(pieces: number[]): Uint32Array {
  const field = newBitfield(PIECES);
  for (const piece of pieces) setBit(field, piece);
  return field;
}

async function listen(server: Server | ReturnType<typeof createHttpServer>): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function parentAgent(
  model: ParentModel,
  options: { ring?: boolean; corrupt?: boolean; idleTimeoutMs?: number } = {},
): Promise<{ url: string; close: () => Promise<void> }> {
  const wire = new PeerWireServer({
    model: (hex) => (hex === MODEL ? model.served(options.ring ?? true) : undefined),
    uploads: new UploadSlots(2),
    throttle: new Throttle(undefined),
    ...(options.corrupt === true ? { corruptUploads: true } : {}),
    ...(options.idleTimeoutMs === undefined ? {} : { idleTimeoutMs: options.idleTimeoutMs }),
  });
  const server = createHttpServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket: Socket, head: Buffer) => {
    if (PeerWireServer.wants(req)) wire.accept(socket, head);
    else socket.destroy();
  });
  const url = await listen(server);
  return {
    url,
    close: async () => {
      wire.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Child {
  feed: RingFeed;
  pieces: number[];
  ended: Promise<WeightcastError | undefined>;
  /** Resolves once `count` pieces came in all. */
  got: (count: number) => Promise<void>;
}

function child(url: string, held: number[], overrides: Partial<RingFeedOptions> = {}): Child {
  const pieces: number[] = [];
  const waiters: Array<{ count: number; resolve: () => void }> = [];
  let endResolve!: (error: WeightcastError | undefined) => void;
  const ended = new Promise<WeightcastError | undefined>((resolve) => (endResolve = resolve));
  const feed = new RingFeed({
    url,
    model: MODEL,
    pieceCount: PIECES,
    helloTimeoutMs: 2000,
    held: () => bits(held),
    pieceLength: length,
    bufferFor: (_piece, bytes) => Buffer.alloc(bytes),
    onPiece: async (piece, bytes) => {
      // As a store does: the check, then the write (here, the next turn of the loop).
      if (digest(bytes) !== digest(bytesOf(piece)))
        throw new WeightcastError('PIECE_HASH_MISMATCH', `piece ${piece} from the ring is corrupt`);
      await sleep(0);
      pieces.push(piece);
      for (const waiter of waiters.filter((w) => pieces.length >= w.count)) waiter.resolve();
    },
    onEnd: (error) => endResolve(error),
    ...overrides,
  });
  const got = (count: number): Promise<void> =>
    new Promise((resolve) => {
      if (pieces.length >= count) resolve();
      else waiters.push({ count, resolve });
    });
  return { feed, pieces, ended, got };
}

test('a parent pushes what it holds and the child lacks, then what it verifies; a HAVE skips a piece', async () => {
  const model = new ParentModel([0, 1, 2, 5, 7, 11]);
  const parent = await parentAgent(model);
  try {
    const c = child(parent.url, [1, 7]);
    await within(c.got(4), 10_000, 'the backlog');
    assert.deepEqual(c.pieces, [0, 2, 5, 11], 'the backlog, in piece order');
    c.feed.have(3);
    await sleep(50);
    model.verify(3);
    model.verify(9);
    model.verify(4);
    await within(c.got(6), 10_000, 'the new pieces');
    assert.deepEqual(c.pieces.slice(4), [9, 4], 'new pieces in the order verified; 3 was had');
    c.feed.close();
    assert.equal(await within(c.ended, 10_000, 'the feed to end'), undefined);
    for (let i = 0; i < 50 && model.watchers > 0; i++) await sleep(10);
    assert.equal(model.watchers, 0, 'the parent stopped watching when the child left');
  } finally {
    await parent.close();
  }
});

test('a model that does not push refuses the subscription with a GOODBYE', async () => {
  const model = new ParentModel([0]);
  const parent = await parentAgent(model, { ring: false });
  try {
    const c = child(parent.url, []);
    const error = await c.ended;
    assert.equal(error?.code, 'SWARM_PROTOCOL');
    assert.match(error?.message ?? '', /does not push/);
  } finally {
    await parent.close();
  }
});

test('a fault of the parent’s own while opening a feed ends that feed, said in a warning; the parent serves on', async () => {
  const model = new ParentModel([0, 1, 2]);
  const served = model.served.bind(model);
  let faults = 1;
  // The first subscription finds the parent's model broken (a bug of ours, thrown synchronously).
  model.served = (ring) => {
    const base = served(ring);
    if (base.ring === undefined) return base;
    const ringPart = base.ring;
    return {
      ...base,
      ring: {
        ...ringPart,
        heldBitfield: () => {
          if (faults-- > 0) throw new TypeError('a fault in the parent');
          return ringPart.heldBitfield();
        },
      },
    };
  };
  const warnings = captureWarnings();
  const parent = await parentAgent(model);
  try {
    const first = child(parent.url, []);
    const error = await within(first.ended, 10_000, 'the first feed to end');
    assert.equal(error?.code, 'ORIGIN_IO', 'the child sees its feed dropped');
    const second = child(parent.url, []);
    await within(second.got(3), 10_000, 'the second feed’s pieces');
    assert.deepEqual(second.pieces, [0, 1, 2]);
    second.feed.close();
    await within(second.ended, 10_000, 'the second feed to end');
    await sleep(0);
    assert.ok(
      warnings.messages.some((text) => text.includes('a fault in the parent')),
      `no warning named the fault: ${warnings.messages.join(' | ')}`,
    );
  } finally {
    warnings.stop();
    await parent.close();
  }
});

test('a fault of the child’s own while taking a push ends its feed with a retryable error and a warning', async () => {
  const model = new ParentModel([0, 1]);
  const parent = await parentAgent(model);
  const warnings = captureWarnings();
  try {
    const c = child(parent.url, [], {
      bufferFor: () => {
        throw new TypeError('a fault in the child');
      },
    });
    const error = await within(c.ended, 10_000, 'the feed to end');
    assert.equal(error?.code, 'ORIGIN_IO');
    assert.equal(error?.details['retryable'], true);
    assert.match(error?.message ?? '', /internal error \(a fault in the child\)/);
    await sleep(0);
    assert.ok(
      warnings.messages.some((text) => text.includes('a fault in the child')),
      warnings.messages.join(' | '),
    );
  } finally {
    warnings.stop();
    await parent.close();
  }
});

test('corrupt pushes reach the child’s check, which ends the feed with its error', async () => {
  const model = new ParentModel([0, 1]);
  const parent = await parentAgent(model, { corrupt: true });
  try {
    const c = child(parent.url, []);
    const error = await c.ended;
    assert.equal(error?.code, 'PIECE_HASH_MISMATCH');
    assert.deepEqual(c.pieces, []);
  } finally {
    await parent.close();
  }
});

test('a child that stops reading holds a push; the parent’s idle timeout ends it, a quiet feed stays', async () => {
  const quiet = new ParentModel([]);
  const idle = await parentAgent(quiet, { idleTimeoutMs: 200 });
  const model = new ParentModel([...Array(PIECES).keys()]);
  const parent = await parentAgent(model, { idleTimeoutMs: 200 });
  try {
    const waiting = child(idle.url, []);
    let release!: () => void;
    const stuckStore = new Promise<void>((resolve) => (release = resolve));
    const stuck = child(parent.url, [], { pendingMax: 1, onPiece: () => stuckStore });
    await within(
      (async () => {
        while (model.watchers === 0) await sleep(20);
        while (model.watchers > 0) await sleep(20);
      })(),
      10_000,
      'the parent to drop the subscription whose child stopped reading',
    );
    release();
    const error = await within(stuck.ended, 10_000, 'the stuck child’s feed to end');
    assert.equal(error?.code, 'ORIGIN_IO', 'once it reads again, the child finds its feed gone');
    await sleep(400);
    quiet.verify(2);
    await within(waiting.got(1), 10_000, 'the quiet feed’s piece');
    assert.deepEqual(waiting.pieces, [2], 'a feed quiet for twice the idle timeout still delivers');
    waiting.feed.close();
  } finally {
    await parent.close();
    await idle.close();
  }
});

/** A parent scripted by the test: it answers the upgrade and the HELLO, then runs `script`. */
async function fakeParent(
  script: (socket: Socket) => void,
  answer = true,
): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    let head = '';
    const onData = (chunk: Buffer): void => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (!answer) return;
      socket.write(
        'HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: weightcast-peer\r\n\r\n',
      );
      socket.write(encodeHello({ version: 1, model: modelDigestBytes(MODEL), credential: new Uint8Array() }));
      script(socket);
    };
    socket.on('data', onData);
  });
  const url = await listen(server);
  return {
    url,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

test('a lying parent (wrong length, a piece past the last) or a silent one ends the feed with a clear error', async () => {
  const cases: Array<[string, (socket: Socket) => void, boolean, string, RegExp]> = [
    [
      'wrong length',
      (s) => s.write(Buffer.concat([encodePushHead(0, 10), Buffer.alloc(10)])),
      true,
      'SWARM_PROTOCOL',
      /10 bytes for piece 0/,
    ],
    ['past the last', (s) => s.write(encodePushHead(PIECES, 5)), true, 'SWARM_PROTOCOL', /past the last/],
    ['garbage', (s) => s.write(Buffer.alloc(12, 0xee)), true, 'SWARM_PROTOCOL', /peer wire/],
    ['silent', () => undefined, false, 'ORIGIN_TIMEOUT', /did not open the feed/],
  ];
  for (const [name, script, answer, code, message] of cases) {
    const parent = await fakeParent(script, answer);
    try {
      const c = child(parent.url, [], { helloTimeoutMs: 300 });
      const error = await within(c.ended, 10_000, name);
      assert.equal(error?.code, code, name);
      assert.match(error?.message ?? '', message, name);
    } finally {
      await parent.close();
    }
  }
});

test('the SUBSCRIBE goes with the HELLO, and a push that comes with the parent’s answer is taken whole', async () => {
  // A parent that answers only once it has the child's SUBSCRIBE (so the child sent it without
  // waiting for the parent's HELLO), then writes its answer, its HELLO, piece 0 and the first half
  // of piece 1 in one write, and the rest of piece 1 a little later.
  let subscribedHeld: number[] | undefined;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    let bytes = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      bytes = Buffer.concat([bytes, chunk]);
      const end = bytes.indexOf('\r\n\r\n');
      if (end === -1) return;
      const events = new FrameDecoder('server').push(bytes.subarray(end + 4));
      if (!events.some((event) => event.type === 'subscribe-end')) return;
      socket.off('data', onData);
      const body = events.flatMap((event) => (event.type === 'body' ? [Buffer.from(event.bytes)] : []));
      const held = Buffer.concat(body);
      subscribedHeld = [...Array(PIECES).keys()].filter(
        (piece) => ((held[piece >> 3] ?? 0) >> (piece & 7)) & 1,
      );
      const half = length(1) / 2;
      socket.write(
        Buffer.concat([
          Buffer.from(
            'HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: weightcast-peer\r\n\r\n',
          ),
          encodeHello({ version: 1, model: modelDigestBytes(MODEL), credential: new Uint8Array() }),
          encodePushHead(0, length(0)),
          bytesOf(0),
          encodePushHead(1, length(1)),
          bytesOf(1).subarray(0, half),
        ]),
      );
      setTimeout(() => socket.write(bytesOf(1).subarray(half)), 50);
    };
    socket.on('data', onData);
  });
  const url = await listen(server);
  try {
    const c = child(url, [5, 9]);
    await within(c.got(2), 10_000, 'the two pieces');
    assert.deepEqual(c.pieces, [0, 1], 'both pieces, whole and right (the child checks their digests)');
    assert.deepEqual(subscribedHeld, [5, 9], 'the SUBSCRIBE says what the child held');
    c.feed.close();
    assert.equal(await within(c.ended, 10_000, 'the feed to end'), undefined);
  } finally {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('the parent refuses a SUBSCRIBE of the wrong size and any request after one', async () => {
  const model = new ParentModel([0]);
  const parent = await parentAgent(model);
  try {
    const port = Number(new URL(parent.url).port);
    const exchange = async (frames: Buffer[]): Promise<WireEvent[]> => {
      const socket = connect(port, '127.0.0.1');
      const decoder = new FrameDecoder('client');
      const events: WireEvent[] = [];
      let head = true;
      socket.on('data', (chunk: Buffer) => {
        let bytes = chunk;
        if (head) {
          const end = chunk.indexOf('\r\n\r\n');
          bytes = chunk.subarray(end + 4);
          head = false;
        }
        events.push(...decoder.push(bytes));
      });
      socket.write(
        'GET /v1/peer-wire HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: weightcast-peer\r\n\r\n',
      );
      socket.write(encodeHello({ version: 1, model: modelDigestBytes(MODEL), credential: new Uint8Array() }));
      for (const frame of frames) socket.write(frame);
      await within(
        new Promise<void>((resolve) => socket.on('close', () => resolve())),
        10_000,
        'the parent to close',
      );
      return events;
    };
    const wrongSize = await exchange([encodeSubscribe(newBitfield(2 * PIECES), 2 * PIECES)]);
    const bye = wrongSize.find((event) => event.type === 'goodbye');
    assert.equal(bye?.type === 'goodbye' && bye.status, WireStatus.badRequest);
    const afterSubscribe = await exchange([
      encodeSubscribe(bits([0]), PIECES),
      encodeRequest({ requestId: 1, piece: 0, offset: 0, length: 10 }),
    ]);
    const refused = afterSubscribe.find((event) => event.type === 'goodbye');
    assert.equal(refused?.type === 'goodbye' && refused.status, WireStatus.protocol);
  } finally {
    await parent.close();
  }
});

test('a parent pushes one model to at most two subscribers at once; a third is told it is busy', async () => {
  const model = new ParentModel([]);
  const parent = await parentAgent(model);
  try {
    const first = child(parent.url, []);
    const second = child(parent.url, []);
    await within(
      (async () => {
        while (model.watchers < 2) await sleep(10);
      })(),
      10_000,
      'two subscriptions',
    );
    const third = child(parent.url, []);
    const error = await within(third.ended, 10_000, 'the third feed to end');
    assert.equal(error?.code, 'SWARM_BUSY');
    first.feed.close();
    await within(
      (async () => {
        while (model.watchers > 1) await sleep(10);
      })(),
      10_000,
      'the first subscription to close',
    );
    const fourth = child(parent.url, []);
    model.verify(5);
    await within(fourth.got(1), 10_000, 'a push to the subscriber that took the freed place');
    second.feed.close();
    fourth.feed.close();
  } finally {
    await parent.close();
  }
});

test('cut-through: a piece arriving at the parent is passed on as its bytes land, its buffer pinned until sent', async () => {
  const model = new ParentModel([0]);
  const parent = await parentAgent(model);
  try {
    const c = child(parent.url, [0]);
    await within(
      (async () => {
        while (model.arriving.size === 0) await sleep(10);
      })(),
      10_000,
      'the subscription',
    );
    const [listener] = [...model.arriving];
    const piece = 7;
    const buffer = Buffer.alloc(length(piece));
    let pins = 0;
    listener!.start(piece, buffer, () => {
      pins++;
      return () => pins--;
    });
    assert.equal(pins, 1, 'the buffer is pinned while its bytes go out');
    const half = buffer.length >> 1;
    bytesOf(piece).copy(buffer, 0, 0, half);
    listener!.progress(piece, half);
    await sleep(20);
    assert.deepEqual(c.pieces, [], 'half a piece is not a piece');
    bytesOf(piece).copy(buffer, half, half);
    listener!.progress(piece, buffer.length);
    listener!.end(piece, true);
    await within(c.got(1), 10_000, 'the piece passed on');
    assert.deepEqual(c.pieces, [piece], 'the child got the bytes, checked');
    for (let i = 0; i < 50 && pins > 0; i++) await sleep(10);
    assert.equal(pins, 0, 'the pin is released once the bytes are written');
    model.verify(piece);
    await sleep(50);
    assert.equal(c.pieces.length, 1, 'a piece passed on is not pushed again once verified here');
    // A piece that stops arriving ends the connection: the child has a truncated push.
    listener!.start(9, Buffer.alloc(length(9)), () => () => undefined);
    listener!.progress(9, 100);
    listener!.end(9, false);
    const error = await within(c.ended, 10_000, 'the feed to end');
    assert.equal(error?.code, 'ORIGIN_IO');
  } finally {
    await parent.close();
  }
});
