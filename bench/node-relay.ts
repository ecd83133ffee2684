/**
 * The programs of bench:fanout's node-chain leg (netns/baseline-legs.ts): the least a Node.js
 * process can do to take a model through a host at the links' pace, every piece verified and
 * stored, so the fan-out prints what Node itself costs there (user and kernel CPU-s per GiB) beside
 * weightcast's agents, on the same links and in the same run. The topology is the chain's: a fixed
 * relay origin -> host1 -> ... -> hostN; no scheduling, no pipelining notices, no recovery.
 *
 *   node dist/bench/node-relay.js --origin MODEL_DIR --manifest M --listen ADDRESS:PORT
 *     accepts one downstream, prints `ready`, waits for a line on stdin (the leg's clock), sends the
 *     model's files in the manifest's order and ends.
 *   node dist/bench/node-relay.js --relay DIR --manifest M --upstream ADDRESS:PORT [--listen ADDRESS:PORT]
 *     with --listen it first waits for its downstream; then it connects upstream. Every read lands
 *     in one of a ring of 1 MiB buffers (net `onread`; the socket's receive low-water mark is the
 *     agents', util/receive-low-water.ts, so reads come as seldom as theirs), is hashed into its piece's SHA-256, written
 *     at its file's offset (a positioned write on this thread, through the page cache) and forwarded
 *     downstream from the same buffer; a buffer is read into again once its forward is written.
 *     Prints NODE_CHAIN_RECEIVED_LINE once every byte arrived and every piece matched the manifest.
 *     With --store (the store-chain leg) each piece is kept as an agent keeps it instead: see storeRelay.
 *
 * Each process runs until its stream ends; every wait is bounded (CONNECT_TRIES, IDLE_TIMEOUT_MS).
 */

import { createHash, type Hash } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { createReadStream } from 'node:fs';
import type { Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { parseManifest, type Manifest } from '../src/manifest/manifest.js';
import { ReceiveLowWater } from '../src/util/receive-low-water.js';
import { PieceMap } from '../src/piece/piece-map.js';
import { pieceBuffer } from '../src/piece/direct-io.js';
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

const BUFFER_BYTES = 1024 * 1024;
/** Piece buffers of a `--store` relay: an agent keeps about as many (downloads and recent pieces). */
const PIECE_BUFFERS = 8;
const RING_BUFFERS = 8;

async function origin(
  modelDir: string,
  manifest: Manifest,
  at: { host: string; port: number },
): Promise<void> {
  const down = await acceptOne(at);
  await readyThenWait();
  for (const file of manifest.files) {
    await pipeline(createReadStream(join(modelDir, file.path), { highWaterMark: BUFFER_BYTES }), down, {
      end: false,
    });
  }
  await new Promise<void>((resolve) => down.end(resolve));
}

/** Where the stream stands: which file, where in it, and the piece being hashed. */
class Placement {
  private fileIndex = 0;
  private offset = 0;
  private piece = 0;
  private hash: Hash = createHash('sha256');
  private readonly fds: number[];
  mismatches = 0;
  piecesDone = 0;

  constructor(
    private readonly manifest: Manifest,
    dir: string,
  ) {
    this.fds = manifest.files.map((file) => {
      const path = join(dir, file.path);
      mkdirSync(dirname(path), { recursive: true });
      return openSync(path, 'w');
    });
    this.skipEmptyFiles();
  }

  /** Hashes and writes `chunk`, the stream's next bytes. */
  take(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.length) {
      const file = this.manifest.files[this.fileIndex];
      if (file === undefined) fail('more bytes than the manifest has');
      const pieceEnd = Math.min((this.piece + 1) * this.manifest.pieceSize, file.size);
      const take = Math.min(chunk.length - at, pieceEnd - this.offset);
      const part = chunk.subarray(at, at + take);
      this.hash.update(part);
      writeSync(this.fds[this.fileIndex] ?? -1, part, 0, take, this.offset);
      this.offset += take;
      at += take;
      if (this.offset < pieceEnd) continue;
      if (this.hash.digest('hex') !== file.pieces[this.piece]) this.mismatches++;
      this.piecesDone++;
      this.hash = createHash('sha256');
      this.piece++;
      if (this.offset === file.size) {
        this.fileIndex++;
        this.offset = 0;
        this.piece = 0;
        this.skipEmptyFiles();
      }
    }
  }

  close(): void {
    for (const fd of this.fds) closeSync(fd);
  }

  private skipEmptyFiles(): void {
    while (this.manifest.files[this.fileIndex]?.size === 0) this.fileIndex++;
  }
}

async function relay(
  dir: string,
  manifest: Manifest,
  up: { host: string; port: number },
  listen: { host: string; port: number } | undefined,
): Promise<void> {
  const total = manifest.files.reduce((sum, file) => sum + file.size, 0);
  const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
  const placement = new Placement(manifest, dir);
  const down = listen === undefined ? undefined : await acceptOne(listen);
  const ring = Array.from({ length: RING_BUFFERS }, () => Buffer.allocUnsafeSlow(BUFFER_BYTES));
  /** Forwards not yet written, per ring buffer. */
  const unwritten = new Array<number>(RING_BUFFERS).fill(0);
  let current = 0;
  let filled = 0;
  let received = 0;
  let paused = false;
  /** The upstream socket and its mark, once it is connected. */
  const marks: { upstream?: Socket; lowWater?: ReceiveLowWater } = {};

  const finish = (): void => {
    placement.close();
    if (placement.mismatches > 0 || placement.piecesDone !== pieces)
      fail(`${placement.mismatches} of ${pieces} pieces do not match the manifest`);
    process.stdout.write(`${NODE_CHAIN_RECEIVED_LINE}\n`);
    marks.upstream?.destroy();
    if (down === undefined) process.exit(0);
    down.end(() => process.exit(0));
  };
  const resumeIfFree = (): void => {
    if (!paused || (unwritten[current] ?? 0) > 0) return;
    paused = false;
    marks.upstream?.resume();
  };
  const onRead = (count: number): boolean => {
    const index = current;
    const chunk = (ring[index] as Buffer).subarray(filled, filled + count);
    filled += count;
    received += count;
    placement.take(chunk);
    if (down !== undefined) {
      unwritten[index] = (unwritten[index] ?? 0) + 1;
      down.write(chunk, () => {
        unwritten[index] = (unwritten[index] ?? 1) - 1;
        resumeIfFree();
      });
    }
    if (received >= total) {
      finish();
      return false;
    }
    marks.lowWater?.expect(count, total - received);
    if (filled < BUFFER_BYTES) return true;
    // Node asks for the next read's buffer as this callback returns, paused or not: the next ring
    // buffer is named now, and reading resumes only once its forwards are written.
    current = (current + 1) % RING_BUFFERS;
    filled = 0;
    if ((unwritten[current] ?? 0) > 0) {
      paused = true;
      return false;
    }
    return true;
  };

  const upstream = await connectUpstream(up, () => (ring[current] as Buffer).subarray(filled), onRead);
  marks.upstream = upstream;
  marks.lowWater = new ReceiveLowWater(upstream);
  upstream.setTimeout(IDLE_TIMEOUT_MS, () => fail(`upstream silent for ${IDLE_TIMEOUT_MS} ms`));
  upstream.on('error', (error) => fail(`upstream: ${error.message}`));
  upstream.on('end', () => {
    if (received < total) fail(`upstream ended after ${received} of ${total} bytes`);
  });
}

/**
 * A relay that keeps each piece the way an agent does (`--store`): every read lands in the current
 * piece's own buffer (aligned for direct I/O, one of PIECE_BUFFERS reused), is forwarded downstream
 * from there, and the whole piece goes through `PieceStore.put` with an agent's options (verified,
 * written with O_DIRECT where the file system allows it, on this thread while the loop is idle,
 * journalled; a completed file synced and moved to its final name). What the piece layer costs at
 * the links' pace, beside the minimal relay's hash and positioned write.
 */
async function storeRelay(
  dir: string,
  manifest: Manifest,
  up: { host: string; port: number },
  listen: { host: string; port: number } | undefined,
): Promise<void> {
  const map = new PieceMap(manifest);
  const store = await openAgentLikeStore(map, dir);
  const down = listen === undefined ? undefined : await acceptOne(listen);
  const buffers = Array.from({ length: PIECE_BUFFERS }, () => pieceBuffer(map.pieceSize));
  /** Forwards not yet written and puts not yet done, per buffer. */
  const busy = new Array<number>(PIECE_BUFFERS).fill(0);
  let current = 0;
  let piece = 0;
  let length = map.pieceCount > 0 ? map.locate(0).length : 0;
  let filled = 0;
  let paused = false;
  let stored = 0;
  let corrupt = 0;
  /** The upstream socket and its mark, once it is connected. */
  const marks: { upstream?: Socket; lowWater?: ReceiveLowWater } = {};

  const finishIfDone = (): void => {
    if (stored + corrupt < map.pieceCount) return;
    void store.close().then(
      () => {
        if (corrupt > 0) fail(`${corrupt} of ${map.pieceCount} pieces do not match the manifest`);
        process.stdout.write(`${NODE_CHAIN_RECEIVED_LINE}\n`);
        marks.upstream?.destroy();
        if (down === undefined) process.exit(0);
        down.end(() => process.exit(0));
      },
      (error: Error) => fail(`closing the store: ${error.message}`),
    );
  };
  const release = (index: number): void => {
    busy[index] = (busy[index] ?? 1) - 1;
    if (paused && index === current && busy[index] === 0) {
      paused = false;
      marks.upstream?.resume();
    }
  };
  const onRead = (count: number): boolean => {
    const index = current;
    const buffer = buffers[index] as Buffer;
    const chunk = buffer.subarray(filled, filled + count);
    filled += count;
    if (down !== undefined) {
      busy[index] = (busy[index] ?? 0) + 1;
      down.write(chunk, () => release(index));
    }
    if (filled < length) {
      marks.lowWater?.expect(count, length - filled);
      return true;
    }
    busy[index] = (busy[index] ?? 0) + 1;
    const done = piece;
    store.put(done, buffer.subarray(0, length)).then(
      (result) => {
        if (result === 'corrupt') corrupt++;
        else stored++;
        release(index);
        finishIfDone();
      },
      (error: Error) => fail(`storing piece ${done}: ${error.message}`),
    );
    piece++;
    filled = 0;
    if (piece >= map.pieceCount) return false;
    length = map.locate(piece).length;
    marks.lowWater?.expect(count, length);
    // Node asks for the next read's buffer as this callback returns, paused or not: the next piece's
    // buffer is named now, and reading resumes only once it is free.
    current = (current + 1) % PIECE_BUFFERS;
    if ((busy[current] ?? 0) > 0) {
      paused = true;
      return false;
    }
    return true;
  };

  const upstream = await connectUpstream(
    up,
    () => (buffers[current] as Buffer).subarray(filled, length),
    onRead,
  );
  marks.upstream = upstream;
  marks.lowWater = new ReceiveLowWater(upstream);
  upstream.setTimeout(IDLE_TIMEOUT_MS, () => fail(`upstream silent for ${IDLE_TIMEOUT_MS} ms`));
  upstream.on('error', (error) => fail(`upstream: ${error.message}`));
  upstream.on('end', () => {
    if (piece < map.pieceCount) fail(`upstream ended at piece ${piece} of ${map.pieceCount}`);
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      origin: { type: 'string' },
      relay: { type: 'string' },
      manifest: { type: 'string' },
      listen: { type: 'string' },
      upstream: { type: 'string' },
      store: { type: 'boolean' },
    },
  });
  if (values.manifest === undefined) fail('--manifest is required');
  const manifest = parseManifest(readFileSync(values.manifest), values.manifest);
  if (values.origin !== undefined) {
    await origin(values.origin, manifest, endpoint(values.listen, '--listen'));
    return;
  }
  if (values.relay === undefined) fail('give --origin MODEL_DIR or --relay DIR');
  await (values.store === true ? storeRelay : relay)(
    values.relay,
    manifest,
    endpoint(values.upstream, '--upstream'),
    values.listen === undefined ? undefined : endpoint(values.listen, '--listen'),
  );
}

await main();
