/**
 * What the fan-out's relay programs (bench/node-relay.ts, bench/ring-relay.ts) share: failing with
 * a message, ADDRESS:PORT flags, one accepted downstream connection, an upstream connection made
 * with retries while the peer may still be starting, and a piece store opened as an agent opens one
 * for a destination. Every wait is bounded.
 */

import { mkdirSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { basename, join } from 'node:path';
import { enableDirectIo } from '../src/piece/direct-io.js';
import type { PieceMap } from '../src/piece/piece-map.js';
import { PieceStore } from '../src/piece/store.js';

export const CONNECT_TRIES = 100;
export const CONNECT_RETRY_MS = 50;
export const IDLE_TIMEOUT_MS = 30_000;

/** The program's name in its messages: node-relay or ring-relay. */
const programName = basename(process.argv[1] ?? 'relay').replace(/\.[jt]s$/, '');

export function fail(message: string): never {
  process.stderr.write(`${programName}: ${message}\n`);
  process.exit(1);
}

export function endpoint(text: string | undefined, flag: string): { host: string; port: number } {
  const match = /^(.+):(\d+)$/.exec(text ?? '');
  if (match === null) fail(`${flag} takes ADDRESS:PORT`);
  return { host: match[1] ?? '', port: Number(match[2]) };
}

/** Listens at `at` for one connection (then stops listening), within IDLE_TIMEOUT_MS. */
export function acceptOne(at: { host: string; port: number }): Promise<Socket> {
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

/** Connects to the predecessor (it may still be starting: CONNECT_TRIES), reading with `onread`. */
export async function connectUpstream(
  up: { host: string; port: number },
  buffer: () => Uint8Array,
  callback: (count: number) => boolean,
): Promise<Socket> {
  for (let attempt = 1; ; attempt++) {
    const socket = await new Promise<Socket | undefined>((resolve) => {
      const made = connect({ host: up.host, port: up.port, onread: { buffer, callback } });
      made.once('connect', () => resolve(made));
      made.once('error', () => resolve(undefined));
    });
    if (socket !== undefined) return socket;
    if (attempt >= CONNECT_TRIES) fail(`cannot connect to ${up.host}:${up.port}`);
    await new Promise((resolve) => setTimeout(resolve, CONNECT_RETRY_MS));
  }
}

/**
 * A store writing the model into `dir` with an agent's options: verified pieces, O_DIRECT where the
 * file system takes it, writes on the event loop while it is idle, the journal, files synced and
 * moved to their final names.
 */
export async function openAgentLikeStore(map: PieceMap, dir: string): Promise<PieceStore> {
  mkdirSync(dir, { recursive: true });
  return PieceStore.open(map, {
    dataDir: join(dir, '.weightcast', 'partial'),
    stateDir: join(dir, '.weightcast', 'state'),
    finalDir: dir,
    directIo: enableDirectIo(dir),
    checkSpace: true,
    inlineWrites: true,
    hashThreads: 0,
  });
}

/** Says `ready`, then waits for a line on stdin: the leg's clock starting. */
export async function readyThenWait(): Promise<void> {
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) =>
    process.stdin.once('data', () => {
      process.stdin.destroy();
      resolve();
    }),
  );
}
