import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { connect as connectTls, createServer as createTlsServer } from 'node:tls';
import {
  LOW_WATER_MAX_BYTES,
  ReceiveLowWater,
  receiveLowWaterAvailable,
  receiveLowWaterNote,
  setReceiveLowWater,
} from '../../src/util/receive-low-water.js';
import { tempDir } from '../helpers/fixtures.js';
import { makeTestCa } from '../helpers/tls.js';

/** A loopback server handing each accepted socket to `onSocket`, and a client connected to it. */
async function socketPair(): Promise<{ server: Server; client: Socket; peer: Socket }> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
  await once(client, 'connect');
  const [peer] = await accepted;
  return { server, client, peer };
}

async function closePair(pair: { server: Server; client: Socket; peer: Socket }): Promise<void> {
  pair.client.destroy();
  pair.peer.destroy();
  await new Promise<void>((resolve) => pair.server.close(() => resolve()));
}

test('the native helper is built on Linux (npm runs node-gyp at install; a fresh machine has the tools)', () => {
  if (process.platform !== 'linux' || process.env['WEIGHTCAST_RCVLOWAT'] === 'off') {
    assert.equal(receiveLowWaterAvailable(), false);
    return;
  }
  assert.equal(
    receiveLowWaterAvailable(),
    true,
    'build/Release/weightcast_native.node is missing: `npm ci` prints why node-gyp could not build native/',
  );
});

test('with a low-water mark the kernel holds bytes back until that many are queued', async (t) => {
  if (!receiveLowWaterAvailable()) return t.skip('no native helper on this machine');
  const pair = await socketPair();
  try {
    assert.equal(setReceiveLowWater(pair.client, 50), true);
    const reads: Array<{ bytes: number; atMs: number }> = [];
    const started = performance.now();
    pair.client.on('data', (chunk: Buffer) =>
      reads.push({ bytes: chunk.length, atMs: performance.now() - started }),
    );
    pair.peer.write(Buffer.alloc(10, 1));
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(reads.length, 0, '10 bytes of 50 wake no reader');
    pair.peer.write(Buffer.alloc(100, 2));
    for (let i = 0; i < 100 && reads.length === 0; i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(reads.length, 1);
    assert.equal(reads[0]?.bytes, 110, 'both writes in one read');
    assert.ok((reads[0]?.atMs ?? 0) >= 190, `read after the second write, at ${reads[0]?.atMs} ms`);
  } finally {
    await closePair(pair);
  }
});

test('a mark never waits for bytes the body will not bring, nor for more than its sender sends soon', async (t) => {
  if (!receiveLowWaterAvailable()) return t.skip('no native helper on this machine');
  const pair = await socketPair();
  try {
    const mark = new ReceiveLowWater(pair.client);
    let received = 0;
    let expected = 3 * LOW_WATER_MAX_BYTES + 1000;
    pair.client.on('data', (chunk: Buffer) => {
      received += chunk.length;
      mark.expect(chunk.length, Math.max(0, expected - received));
    });
    // A fast first part (the mark learns the rate), a pause, then the last 1000 bytes: fewer than
    // the mark would hold, and they must arrive without waiting for more.
    pair.peer.write(Buffer.alloc(3 * LOW_WATER_MAX_BYTES));
    await new Promise((resolve) => setTimeout(resolve, 150));
    pair.peer.write(Buffer.alloc(500));
    await new Promise((resolve) => setTimeout(resolve, 150));
    pair.peer.write(Buffer.alloc(500));
    for (let i = 0; i < 100 && received < expected; i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(received, expected, 'the body arrived whole without more bytes behind it');
    // Between bodies the mark is 1: a small frame alone is read at once.
    expected += 12;
    const at = performance.now();
    pair.peer.write(Buffer.alloc(12));
    for (let i = 0; i < 100 && received < expected; i++)
      await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(received, expected);
    assert.ok(performance.now() - at < 400, 'a 12-byte frame between bodies was not held back');
  } finally {
    await closePair(pair);
  }
});

test('a socket whose option cannot be set is left alone', async () => {
  const pair = await socketPair();
  pair.client.destroy();
  try {
    assert.equal(setReceiveLowWater(pair.client, 1000), false, 'a closed socket has no descriptor');
    const mark = new ReceiveLowWater(pair.client);
    mark.expect(1000, 1_000_000);
  } finally {
    await closePair(pair);
  }
});

test('a TLS socket gets no mark: under it the bytes are ciphertext, and a half-read record would stall', async (t) => {
  if (!receiveLowWaterAvailable()) return t.skip('no native helper on this machine');
  const dir = await tempDir('low-water-tls');
  const ca = await makeTestCa(dir.path, 'lowat');
  const leaf = await ca.issue('server');
  const server = createTlsServer({ cert: leaf.cert, key: leaf.key }, (socket) => socket.end('hello'));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = connectTls({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', ca: ca.ca });
  try {
    await once(client, 'secureConnect');
    assert.equal(setReceiveLowWater(client, 1000), false);
  } finally {
    client.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await dir.cleanup();
  }
});

test('an agent on Linux without the helper says so at start, and how to build it; otherwise nothing', () => {
  const note = receiveLowWaterNote('linux', false, {});
  assert.match(note ?? '', /not built/);
  assert.match(note ?? '', /npm rebuild weightcast/);
  assert.equal(receiveLowWaterNote('linux', true, {}), undefined);
  assert.equal(
    receiveLowWaterNote('linux', false, { WEIGHTCAST_RCVLOWAT: 'off' }),
    undefined,
    'turned off on purpose',
  );
  assert.equal(receiveLowWaterNote('darwin', false, {}), undefined, 'only Linux has it');
});
