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
 *
 * Each process runs until its stream ends; every wait is bounded (CONNECT_TRIES, IDLE_TIMEOUT_MS).
 */

import { createHash, type Hash } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { createReadStream } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { parseManifest, type Manifest } from '../src/manifest/manifest.js';
import { ReceiveLowWater } from '../src/util/receive-low-water.js';
import { NODE_CHAIN_RECEIVED_LINE } from './netns/commands.js';

const BUFFER_BYTES = 1024 * 1024;
const RING_BUFFERS = 8;
const CONNECT_TRIES = 100;
const CONNECT_RETRY_MS = 50;
const IDLE_TIMEOUT_MS = 30_000;

function fail(message: string): never {
  process.stderr.write(`node-relay: ${message}\n`);
  process.exit(1);
}

function endpoint(text: string | undefined, flag: string): { host: string; port: number } {
  const match = /^(.+):(\d+)$/.exec(text ?? '');
  if (match === null) fail(`${flag} takes ADDRESS:PORT`);
  return { host: match[1] ?? '', port: Number(match[2]) };
}

/** Listens at `at` for one connection (then stops listening), within IDLE_TIMEOUT_MS. */
function acceptOne(at: { host: string; port: number }): Promise<Socket> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => fail(`nobody connected to ${at.host}:${at.port}`), IDLE_TIMEOUT_MS);
    const server = createServer((socket) => {
      clearTimeout(timer);
      server.close();
      socket.setNoDelay(true);
      socket.on('error', (error) => fail(`downstream: ${error.message}`));
      resolve(socket);
    });
    server.on('error', (error) => fail(`listening at ${at.host}:${at.port}: ${error.message}`));
    server.listen(at.port, at.host);
  });
}

async function origin(
  modelDir: string,
  manifest: Manifest,
  at: { host: string; port: number },
): Promise<void> {
  const down = await acceptOne(at);
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) =>
    process.stdin.once('data', () => {
      process.stdin.destroy();
      resolve();
    }),
  );
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
  let upstream: Socket | undefined;
  /** The upstream socket's mark, made once it is connected. */
  const marks: { lowWater?: ReceiveLowWater } = {};

  const finish = (): void => {
    placement.close();
    if (placement.mismatches > 0 || placement.piecesDone !== pieces)
      fail(`${placement.mismatches} of ${pieces} pieces do not match the manifest`);
    process.stdout.write(`${NODE_CHAIN_RECEIVED_LINE}\n`);
    upstream?.destroy();
    if (down === undefined) process.exit(0);
    down.end(() => process.exit(0));
  };
  const resumeIfFree = (): void => {
    const next = (current + 1) % RING_BUFFERS;
    if (!paused || (unwritten[next] ?? 0) > 0) return;
    paused = false;
    current = next;
    filled = 0;
    upstream?.resume();
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
    const next = (current + 1) % RING_BUFFERS;
    if ((unwritten[next] ?? 0) > 0) {
      paused = true;
      return false;
    }
    current = next;
    filled = 0;
    return true;
  };

  for (let attempt = 1; upstream === undefined; attempt++) {
    upstream = await new Promise<Socket | undefined>((resolve) => {
      const socket = connect({
        host: up.host,
        port: up.port,
        onread: { buffer: () => (ring[current] as Buffer).subarray(filled), callback: onRead },
      });
      socket.once('connect', () => resolve(socket));
      socket.once('error', () => resolve(undefined));
    });
    if (upstream === undefined) {
      if (attempt >= CONNECT_TRIES) fail(`cannot connect to ${up.host}:${up.port}`);
      await new Promise((resolve) => setTimeout(resolve, CONNECT_RETRY_MS));
    }
  }
  marks.lowWater = new ReceiveLowWater(upstream);
  upstream.setTimeout(IDLE_TIMEOUT_MS, () => fail(`upstream silent for ${IDLE_TIMEOUT_MS} ms`));
  upstream.on('error', (error) => fail(`upstream: ${error.message}`));
  upstream.on('end', () => {
    if (received < total) fail(`upstream ended after ${received} of ${total} bytes`);
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
    },
  });
  if (values.manifest === undefined) fail('--manifest is required');
  const manifest = parseManifest(readFileSync(values.manifest), values.manifest);
  if (values.origin !== undefined) {
    await origin(values.origin, manifest, endpoint(values.listen, '--listen'));
    return;
  }
  if (values.relay === undefined) fail('give --origin MODEL_DIR or --relay DIR');
  await relay(
    values.relay,
    manifest,
    endpoint(values.upstream, '--upstream'),
    values.listen === undefined ? undefined : endpoint(values.listen, '--listen'),
  );
}

await main();
