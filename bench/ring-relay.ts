/**
 * The programs of bench:fanout's store-ring leg (netns/baseline-legs.ts): the ring all-gather that
 * docs/measurements/2026-12-07-first-second-and-the-ring.md proposes for healthy swarms, built from
 * the piece store alone, so the fan-out shows what that topology costs and how fast it is on the
 * same links as the swarm. Host i takes from the origin the pieces p with p mod N = i and every other
 * piece from its predecessor i-1; it keeps each piece as an agent does (bench/relay-net.ts:
 * verified, O_DIRECT, journalled, files renamed into place) and only then pushes it on to its
 * successor i+1, unless the successor is where the piece came in. No scheduler, no request or report
 * per piece: a 4-byte piece number before each piece's bytes is all the framing.
 *
 *   node dist/bench/ring-relay.js --origin MODEL_DIR --manifest M --listen ADDRESS:PORT --hosts N
 *     accepts the N hosts (each says its index first), prints `ready`, waits for a line on stdin (the
 *     leg's clock), then sends each host its pieces, in order, all hosts at once.
 *   node dist/bench/ring-relay.js --relay DIR --manifest M --hosts N --index I --origin ADDRESS:PORT
 *       --upstream ADDRESS:PORT --listen ADDRESS:PORT
 *     listens for its successor, connects to its predecessor, waits for its successor, then connects
 *     to the origin (so the origin is ready only once the whole ring is). Prints
 *     NODE_CHAIN_RECEIVED_LINE once every piece is stored; a piece that does not match the manifest
 *     ends it with exit 1.
 *
 * Every wait is bounded (relay-net.ts); pieces in memory are bounded by PIECE_BUFFERS_MAX.
 */

import { open as openFile, type FileHandle } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseManifest, type Manifest } from '../src/manifest/manifest.js';
import { PieceMap } from '../src/piece/piece-map.js';
import { pieceBuffer } from '../src/piece/direct-io.js';
import { ReceiveLowWater } from '../src/util/receive-low-water.js';
import { NODE_CHAIN_RECEIVED_LINE } from './netns/commands.js';
import {
  IDLE_TIMEOUT_MS,
  acceptOne,
  connectUpstream,
  endpoint,
  fail,
  openAgentLikeStore,
  readyThenWait,
} from './relay-net.js';

const HEAD_BYTES = 4;
/** Pieces a host holds in memory at most (arriving, being stored, being pushed on). */
const PIECE_BUFFERS_MAX = 256;
/**
 * Back-pressure, after a piece: the origin's stream stops being read while this many pieces are in
 * memory, the predecessor's while this many wait for the store. The predecessor's stream never
 * waits on pieces still being pushed on: if every host held back the stream its pushes wait on, the
 * whole ring would stop; the store finishes its pieces on its own, and what enters the ring comes
 * from the origin.
 */
const ORIGIN_HOLD_PIECES = 32;
const STORE_HOLD_PIECES = 16;

type Endpoint = { host: string; port: number };

function head(piece: number): Buffer {
  const bytes = Buffer.allocUnsafe(HEAD_BYTES);
  bytes.writeUInt32BE(piece, 0);
  return bytes;
}

async function origin(modelDir: string, manifest: Manifest, at: Endpoint, hosts: number): Promise<void> {
  const map = new PieceMap(manifest);
  const byIndex = new Array<Socket | undefined>(hosts);
  let joined = 0;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => fail(`${joined} of ${hosts} hosts connected`), IDLE_TIMEOUT_MS);
    const server = createServer((socket) => {
      socket.setNoDelay(true);
      socket.on('error', (error) => fail(`a host: ${error.message}`));
      socket.once('data', (hello: Buffer) => {
        const index = hello.length === HEAD_BYTES ? hello.readUInt32BE(0) : -1;
        if (index < 0 || index >= hosts || byIndex[index] !== undefined) fail('a host sent a bad hello');
        byIndex[index] = socket;
        if (++joined < hosts) return;
        clearTimeout(timer);
        server.close();
        resolve();
      });
    });
    server.on('error', (error) => fail(`listening at ${at.host}:${at.port}: ${error.message}`));
    server.listen(at.port, at.host);
  });
  await readyThenWait();
  const files = await Promise.all(manifest.files.map((file) => openFile(join(modelDir, file.path), 'r')));
  await Promise.all(byIndex.map((socket, index) => sendClass(map, files, socket as Socket, index, hosts)));
  await Promise.all(files.map((file) => file.close()));
}

/** Sends `socket` every piece p with p mod hosts = index, each after its number, then ends it. */
async function sendClass(
  map: PieceMap,
  files: FileHandle[],
  socket: Socket,
  index: number,
  hosts: number,
): Promise<void> {
  const buffer = Buffer.allocUnsafe(map.pieceSize);
  for (let piece = index; piece < map.pieceCount; piece += hosts) {
    const where = map.locate(piece);
    const { bytesRead } = await (files[where.fileIndex] as FileHandle).read(
      buffer,
      0,
      where.length,
      where.offset,
    );
    if (bytesRead !== where.length) fail(`piece ${piece}: read ${bytesRead} of ${where.length} bytes`);
    socket.write(head(piece));
    // The buffer is read into again only once the kernel has taken these bytes.
    await new Promise<void>((resolve) =>
      socket.write(buffer.subarray(0, where.length), (error) =>
        error === undefined || error === null ? resolve() : fail(`host ${index}: ${error.message}`),
      ),
    );
  }
  await new Promise<void>((resolve) => socket.end(resolve));
}

/**
 * One incoming stream of framed pieces (from the origin or the predecessor), read with `onread`:
 * the 4-byte head into a small buffer, each piece's bytes straight into a piece buffer.
 */
class FramedReader {
  private readonly headBytes = Buffer.alloc(HEAD_BYTES);
  private headFilled = 0;
  private body: { piece: number; length: number; buffer: Buffer; filled: number } | undefined;
  lowWater: ReceiveLowWater | undefined;
  /** Pieces that arrived whole on this stream. */
  pieces = 0;

  /** It stopped reading after a piece because too many were in memory (see `busy`). */
  paused = false;

  constructor(
    private readonly map: PieceMap,
    private readonly take: () => Buffer,
    private readonly onPiece: (piece: number, buffer: Buffer, length: number) => void,
    readonly hold: () => boolean,
    private readonly name: string,
  ) {}

  /** Where the next read lands (Node asks as each read's callback returns). */
  buffer(): Uint8Array {
    return this.body === undefined
      ? this.headBytes.subarray(this.headFilled)
      : this.body.buffer.subarray(this.body.filled, this.body.length);
  }

  landed(count: number): boolean {
    const body = this.body;
    if (body === undefined) {
      this.headFilled += count;
      if (this.headFilled === HEAD_BYTES) {
        this.headFilled = 0;
        const piece = this.headBytes.readUInt32BE(0);
        if (piece >= this.map.pieceCount) fail(`${this.name} sent piece ${piece}, beyond the model`);
        const length = this.map.locate(piece).length;
        this.body = { piece, length, buffer: this.take(), filled: 0 };
        this.lowWater?.expect(count, length);
      }
      return true;
    }
    body.filled += count;
    if (body.filled < body.length) {
      this.lowWater?.expect(count, body.length - body.filled);
      return true;
    }
    this.body = undefined;
    this.pieces++;
    this.lowWater?.expect(count, 0);
    this.onPiece(body.piece, body.buffer, body.length);
    // Stopping here is safe: the next read is aimed at this reader's own head buffer.
    this.paused = this.hold();
    return !this.paused;
  }
}

async function ringRelay(
  dir: string,
  manifest: Manifest,
  flags: { hosts: number; index: number; origin: Endpoint; upstream: Endpoint; listen: Endpoint },
): Promise<void> {
  const { hosts, index } = flags;
  const successor = (index + 1) % hosts;
  const map = new PieceMap(manifest);
  const store = await openAgentLikeStore(map, dir);
  const free: Buffer[] = [];
  let made = 0;
  const take = (): Buffer => {
    const reused = free.pop();
    if (reused !== undefined) return reused;
    if (++made > PIECE_BUFFERS_MAX) fail(`more than ${PIECE_BUFFERS_MAX} pieces in memory`);
    return pieceBuffer(map.pieceSize);
  };
  let storing = 0;
  const holdOrigin = (): boolean => made - free.length >= ORIGIN_HOLD_PIECES || storing >= STORE_HOLD_PIECES;
  const holdPredecessor = (): boolean => storing >= STORE_HOLD_PIECES;
  const streams: Array<{ reader: FramedReader; socket: Socket }> = [];
  /** Reads again each stream that stopped while its hold no longer applies. */
  const resumeStreams = (): void => {
    for (const { reader, socket } of streams) {
      if (!reader.paused || reader.hold()) continue;
      reader.paused = false;
      socket.resume();
    }
  };
  const give = (buffer: Buffer): void => {
    free.push(buffer);
    resumeStreams();
  };
  const seen = new Uint8Array(map.pieceCount);
  let stored = 0;
  /** The successor's connection, once it is accepted. */
  const out: { down?: Socket } = {};
  const sockets: Socket[] = [];

  const finish = (): void => {
    void store.close().then(
      () => {
        process.stdout.write(`${NODE_CHAIN_RECEIVED_LINE}\n`);
        for (const socket of sockets) socket.destroy();
        const down = out.down;
        if (down === undefined) process.exit(0);
        down.end(() => process.exit(0));
      },
      (error: Error) => fail(`closing the store: ${error.message}`),
    );
  };
  const onPiece = (piece: number, buffer: Buffer, length: number): void => {
    if (seen[piece] === 1) fail(`piece ${piece} arrived twice`);
    seen[piece] = 1;
    const bytes = buffer.subarray(0, length);
    storing++;
    store.put(piece, bytes).then(
      (result) => {
        storing--;
        resumeStreams();
        if (result === 'corrupt')
          fail(`1 of ${map.pieceCount} pieces do not match the manifest (piece ${piece})`);
        // Pushed on only once verified and stored, as an agent serves only verified pieces; not to
        // the host where it came in from the origin, which holds it.
        const down = out.down;
        if (piece % hosts !== successor && down !== undefined) {
          down.write(head(piece));
          down.write(bytes, () => give(buffer));
        } else {
          give(buffer);
        }
        if (++stored === map.pieceCount) finish();
      },
      (error: Error) => fail(`storing piece ${piece}: ${error.message}`),
    );
  };

  const downstream = acceptOne(flags.listen);
  const readers = [
    new FramedReader(map, take, onPiece, holdPredecessor, 'the predecessor'),
    new FramedReader(map, take, onPiece, holdOrigin, 'the origin'),
  ];
  const [fromUp, fromOrigin] = readers as [FramedReader, FramedReader];
  const upstream = await connectUpstream(
    flags.upstream,
    () => fromUp.buffer(),
    (count) => fromUp.landed(count),
  );
  out.down = await downstream;
  const originSocket = await connectUpstream(
    flags.origin,
    () => fromOrigin.buffer(),
    (count) => fromOrigin.landed(count),
  );
  originSocket.write(head(index));
  for (const [socket, reader, name] of [
    [upstream, fromUp, 'upstream'],
    [originSocket, fromOrigin, 'origin'],
  ] as const) {
    sockets.push(socket);
    streams.push({ reader, socket });
    reader.lowWater = new ReceiveLowWater(socket);
    socket.setTimeout(IDLE_TIMEOUT_MS, () => fail(`${name} silent for ${IDLE_TIMEOUT_MS} ms`));
    socket.on('error', (error) => fail(`${name}: ${error.message}`));
  }
  // Each stream must bring all of its share before it ends: the origin this host's pieces, the
  // predecessor every other.
  const fromOriginCount = Math.ceil((map.pieceCount - index) / hosts);
  const expected = new Map([
    [fromOrigin, fromOriginCount],
    [fromUp, map.pieceCount - fromOriginCount],
  ]);
  for (const [socket, reader, name] of [
    [upstream, fromUp, 'the predecessor'],
    [originSocket, fromOrigin, 'the origin'],
  ] as const) {
    socket.on('end', () => {
      const want = expected.get(reader) ?? 0;
      if (reader.pieces < want) fail(`${name} ended after ${reader.pieces} of its ${want} pieces`);
    });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      origin: { type: 'string' },
      relay: { type: 'string' },
      manifest: { type: 'string' },
      listen: { type: 'string' },
      upstream: { type: 'string' },
      hosts: { type: 'string' },
      index: { type: 'string' },
    },
  });
  if (values.manifest === undefined) fail('--manifest is required');
  const manifest = parseManifest(readFileSync(values.manifest), values.manifest);
  const hosts = Number(values.hosts);
  if (!Number.isInteger(hosts) || hosts < 2) fail('--hosts takes a whole number of at least 2');
  if (values.relay === undefined) {
    if (values.origin === undefined) fail('give --origin MODEL_DIR or --relay DIR');
    await origin(values.origin, manifest, endpoint(values.listen, '--listen'), hosts);
    return;
  }
  const index = Number(values.index);
  if (!Number.isInteger(index) || index < 0 || index >= hosts) fail('--index takes 0 .. hosts - 1');
  await ringRelay(values.relay, manifest, {
    hosts,
    index,
    origin: endpoint(values.origin, '--origin'),
    upstream: endpoint(values.upstream, '--upstream'),
    listen: endpoint(values.listen, '--listen'),
  });
}

await main();
