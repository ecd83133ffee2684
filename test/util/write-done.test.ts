import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Socket } from 'node:net';
import { once } from 'node:events';
import { writeDone } from '../../src/util/write-done.js';

/** A connected pair of sockets on loopback; the server side does not read until told. */
async function socketPair(): Promise<{ client: Socket; server: Socket; close: () => void }> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const client = connect(port, '127.0.0.1');
  await once(client, 'connect');
  const [peer] = await accepted;
  peer.pause();
  return {
    client,
    server: peer,
    close: () => {
      client.destroy();
      peer.destroy();
      server.close();
    },
  };
}

const WRITES = 40;
const MiB = 1024 * 1024;

test('writeDone: many writes waiting on one socket share one close listener, and all resolve true once taken', async () => {
  const pair = await socketPair();
  try {
    const before = pair.client.listenerCount('close');
    const writes = Array.from({ length: WRITES }, () => writeDone(pair.client, Buffer.alloc(MiB, 1)));
    assert.equal(pair.client.listenerCount('close') - before, 1, 'one listener for all the writes');
    let received = 0;
    pair.server.on('data', (chunk: Buffer) => (received += chunk.length));
    pair.server.resume();
    assert.deepEqual(await Promise.all(writes), new Array<boolean>(WRITES).fill(true));
    assert.ok(received <= WRITES * MiB);
  } finally {
    pair.close();
  }
});

test('writeDone: writes still waiting when the socket closes resolve false; a write after it too', async () => {
  const pair = await socketPair();
  try {
    // The peer reads nothing: the kernel's buffers fill and the later writes wait.
    const writes = Array.from({ length: WRITES }, () => writeDone(pair.client, Buffer.alloc(MiB, 2)));
    await new Promise((resolve) => setTimeout(resolve, 50));
    pair.client.destroy();
    const results = await Promise.all(writes);
    assert.ok(results.includes(false), 'some writes were still waiting and said so');
    assert.equal(await writeDone(pair.client, Buffer.alloc(16)), false);
  } finally {
    pair.close();
  }
});
