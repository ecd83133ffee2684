import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as sleepMs } from 'node:timers/promises';
import { isWeightcastError, type WeightcastError } from '../../src/errors.js';
import { HttpOrigin, type HttpOriginOptions, type RetryEvent } from '../../src/origin/http.js';
import { RangeClient, type RangeGet } from '../../src/origin/range-socket.js';
import { fileBytes, makeTempModel, rejection, serve } from './helpers.js';

const FILE = 'f.bin';
const DATA = randomBytes(300_000);

interface RawRequest {
  /** 1 for the first request the server saw, across connections. */
  index: number;
  /** 1 for the first connection the server accepted. */
  connection: number;
  range: { start: number; end: number } | undefined;
  socket: Socket;
}

interface RawServer {
  url: string;
  requests: RawRequest[];
  connections: () => number;
  /** Resolves once every connection accepted so far has closed. */
  allClosed: () => Promise<void>;
  close: () => Promise<void>;
}

/** A loopback TCP server that hands each request head to `respond`, which writes raw bytes back. */
async function startRawServer(respond: (request: RawRequest) => void): Promise<RawServer> {
  const requests: RawRequest[] = [];
  const closings: Promise<unknown>[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    const connection = closings.length + 1;
    sockets.add(socket);
    // Not events.once: that rejects on 'error', and a reset by the client is expected here.
    closings.push(
      new Promise<void>((resolve) => socket.once('close', () => resolve(void sockets.delete(socket)))),
    );
    socket.on('error', () => undefined);
    let pending = '';
    socket.on('data', (chunk: Buffer) => {
      pending += chunk.toString('latin1');
      for (let heads = 0; heads < 100; heads++) {
        const end = pending.indexOf('\r\n\r\n');
        if (end === -1) return;
        const match = /^range: bytes=(\d+)-(\d+)$/im.exec(pending.slice(0, end));
        pending = pending.slice(end + 4);
        const range = match === null ? undefined : { start: Number(match[1]), end: Number(match[2]) };
        const request = { index: requests.length + 1, connection, range, socket };
        requests.push(request);
        respond(request);
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    requests,
    connections: () => closings.length,
    allClosed: async () => void (await Promise.all(closings)),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

/** The bytes of a well-formed 206 for `range` of DATA, then `trailer`. */
function partialResponse(range: { start: number; end: number } | undefined, trailer = ''): Buffer {
  const { start, end } = range ?? { start: 0, end: DATA.length - 1 };
  const head =
    'HTTP/1.1 206 Partial Content\r\n' +
    `Content-Range: bytes ${start}-${end}/${DATA.length}\r\n` +
    `Content-Length: ${end - start + 1}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head), DATA.subarray(start, end + 1), Buffer.from(trailer)]);
}

function originFor(server: RawServer, options: HttpOriginOptions = {}): HttpOrigin {
  return new HttpOrigin(server.url, { random: () => 0, retries: 2, ...options });
}

async function readRange(origin: HttpOrigin, offset: number, length: number): Promise<Buffer> {
  const target = new Uint8Array(length);
  await origin.readInto(FILE, offset, target);
  return Buffer.from(target);
}

function errorCode(error: unknown): string {
  return isWeightcastError(error) ? error.code : `not a WeightcastError: ${String(error)}`;
}

/** Polls (boundedly) until `condition` holds, for events only the server side can see. */
async function until(condition: () => boolean): Promise<void> {
  for (let tick = 0; tick < 2000 && !condition(); tick++) await sleepMs(5);
  assert.ok(condition(), 'condition never held');
}

test('many ranges are byte-exact over a few kept-alive sockets', async () => {
  const size = 1024 * 1024 + 13;
  const model = await makeTempModel({ [FILE]: size });
  const server = await serve(model.dir);
  const origin = new HttpOrigin(server.url, { connections: 2 });
  const expected = fileBytes(model, FILE);
  try {
    const ranges: [number, number][] = [
      [0, 1],
      [size - 1, 1],
      [0, size],
      [1, size - 2],
      [65_535, 65_537],
      [777_777, 3],
    ];
    // A fixed linear congruential sequence gives unaligned ranges that replay identically.
    let seed = 12345;
    for (let index = 0; index < 40; index++) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      const offset = seed % size;
      ranges.push([offset, 1 + (seed % (size - offset))]);
    }
    for (const [offset, length] of ranges) {
      const bytes = await readRange(origin, offset, length);
      assert.ok(bytes.equals(expected.subarray(offset, offset + length)), `${offset}+${length}`);
    }
    assert.equal(server.stats.connections, 1, 'sequential reads share one socket');
    const together = await Promise.all(ranges.map(([offset, length]) => readRange(origin, offset, length)));
    together.forEach((bytes, index) => {
      const [offset, length] = ranges[index] ?? [0, 0];
      assert.ok(bytes.equals(expected.subarray(offset, offset + length)), `parallel ${offset}+${length}`);
    });
    assert.ok(server.stats.connections <= 2, `${server.stats.connections} connections`);
    assert.equal(server.stats.requests, 2 * ranges.length);
    assert.equal(origin.stats.requests, 2 * ranges.length);
    assert.equal(origin.stats.retries, 0);
  } finally {
    await origin.close();
    await server.close();
    await model.remove();
  }
});

test('bytes past Content-Length leave the read correct and the socket unused again', async () => {
  const server = await startRawServer((request) =>
    request.socket.write(partialResponse(request.range, 'JUNK')),
  );
  const origin = originFor(server);
  try {
    assert.ok((await readRange(origin, 10, 100)).equals(DATA.subarray(10, 110)));
    assert.ok((await readRange(origin, 500, 1000)).equals(DATA.subarray(500, 1500)));
    assert.equal(server.connections(), 2);
    assert.equal(origin.stats.retries, 0);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('an idle socket that receives stray bytes is destroyed', async () => {
  const server = await startRawServer((request) => request.socket.write(partialResponse(request.range)));
  const origin = originFor(server);
  try {
    assert.ok((await readRange(origin, 0, 1000)).equals(DATA.subarray(0, 1000)));
    const first = server.requests[0]?.socket;
    assert.ok(first !== undefined);
    const closed = once(first, 'close');
    first.write('HTTP/1.1 200 OK\r\n\r\n');
    await closed;
    assert.ok((await readRange(origin, 5, 10)).equals(DATA.subarray(5, 15)));
    assert.equal(server.connections(), 2);
    assert.equal(origin.stats.retries, 0);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('a kept-alive socket the server closes is replaced without a retry', async () => {
  const server = await startRawServer((request) => request.socket.end(partialResponse(request.range)));
  const retries: RetryEvent[] = [];
  const origin = originFor(server, { onRetry: (event) => retries.push(event) });
  try {
    for (const offset of [0, 100, 200, 300]) {
      assert.ok((await readRange(origin, offset, 50)).equals(DATA.subarray(offset, offset + 50)));
    }
    assert.deepEqual(retries, []);
    assert.ok(server.connections() >= 4);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('response heads beyond the limit fail clearly and are not retried', async () => {
  const filler = `x-filler: ${'a'.repeat(1000)}\r\n`.repeat(70);
  const server = await startRawServer((request) => request.socket.write(`HTTP/1.1 206 OK\r\n${filler}`));
  const retries: RetryEvent[] = [];
  const origin = originFor(server, { onRetry: (event) => retries.push(event) });
  try {
    const error = await rejection(readRange(origin, 0, 10));
    assert.equal(errorCode(error), 'LIMIT_EXCEEDED');
    assert.match((error as Error).message, /response head is larger than 65536 bytes/);
    assert.deepEqual(retries, []);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('a 200 to a range request is refused unless the range is the whole file', async () => {
  const whole = `HTTP/1.1 200 OK\r\nContent-Length: ${DATA.length}\r\n\r\n` + DATA.toString('latin1');
  const server = await startRawServer((request) => request.socket.write(whole, 'latin1'));
  for (const transport of ['auto', 'undici'] as const) {
    const origin = originFor(server, { transport });
    try {
      const target = new Uint8Array(10);
      const error = await rejection(origin.readInto(FILE, 5, target));
      assert.equal(errorCode(error), 'ORIGIN_RANGE_UNSUPPORTED', transport);
      assert.deepEqual(target, new Uint8Array(10));
      assert.ok((await readRange(origin, 0, DATA.length)).equals(DATA), transport);
    } finally {
      await origin.close();
    }
  }
  await server.close();
});

test('a chunked range never fills the target; HttpOrigin reads it through undici', async () => {
  const chunked = (range: RawRequest['range']): Buffer => {
    const { start, end } = range ?? { start: 0, end: 0 };
    const body = DATA.subarray(start, end + 1);
    const head =
      'HTTP/1.1 206 Partial Content\r\n' +
      `Content-Range: bytes ${start}-${end}/${DATA.length}\r\nTransfer-Encoding: chunked\r\n\r\n`;
    return Buffer.concat([
      Buffer.from(`${head}${body.length.toString(16)}\r\n`),
      body,
      Buffer.from('\r\n0\r\n\r\n'),
    ]);
  };
  const server = await startRawServer((request) => request.socket.write(chunked(request.range)));
  const client = new RangeClient({
    connections: 1,
    connectTimeoutMs: 10_000,
    headersTimeoutMs: 10_000,
    bodyIdleTimeoutMs: 10_000,
    idleSocketTimeoutMs: 10_000,
  });
  const origin = originFor(server);
  try {
    const target = new Uint8Array(100);
    let filled = 0;
    const request: RangeGet = {
      url: new URL(FILE, server.url),
      headers: { range: 'bytes=0-99' },
      target,
      accepts: (head) => head.status === 206,
      onBodyBytes: (count) => (filled += count),
      what: 'test read',
      file: FILE,
    };
    const response = await client.get(request);
    assert.equal(response.status, 206);
    assert.equal(response.bodyFilled, false);
    assert.equal(filled, 0);
    assert.deepEqual(target, new Uint8Array(100));

    assert.ok((await readRange(origin, 1000, 5000)).equals(DATA.subarray(1000, 6000)));
    assert.equal(origin.stats.requests, 2, 'RangeClient, then undici');
  } finally {
    await client.close();
    await origin.close();
    await server.close();
  }
});

test('no answer within the headers timeout is a retryable ORIGIN_TIMEOUT', async () => {
  const server = await startRawServer(() => undefined);
  const origin = originFor(server, { headersTimeoutMs: 50, retries: 1 });
  try {
    const error = await rejection(readRange(origin, 0, 10));
    assert.equal(errorCode(error), 'ORIGIN_RETRIES_EXHAUSTED');
    const cause = (error as WeightcastError).cause;
    assert.ok(isWeightcastError(cause, 'ORIGIN_TIMEOUT'));
    assert.deepEqual([cause.details.timeout, cause.details.retryable], ['headers', true]);
    assert.equal(server.requests.length, 2);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('aborting while waiting for the head destroys the socket at once', async () => {
  const server = await startRawServer(() => undefined);
  const origin = originFor(server);
  const controller = new AbortController();
  try {
    const read = rejection(origin.readInto(FILE, 0, new Uint8Array(10), { signal: controller.signal }));
    await until(() => server.requests.length === 1);
    controller.abort(new Error('user cancelled'));
    const error = await read;
    assert.equal(errorCode(error), 'ABORTED');
    assert.equal(((error as Error).cause as Error).message, 'user cancelled');
    await server.allClosed();
  } finally {
    await origin.close();
    await server.close();
  }
});

test('aborting mid-body destroys the socket and keeps what was filled', async () => {
  const server = await startRawServer((request) => {
    const whole = partialResponse(request.range);
    request.socket.write(whole.subarray(0, whole.length - 1000));
  });
  const origin = originFor(server);
  const controller = new AbortController();
  const target = new Uint8Array(DATA.length);
  try {
    const read = rejection(origin.readInto(FILE, 0, target, { signal: controller.signal }));
    await until(() => origin.stats.bytesRead === DATA.length - 1000);
    controller.abort();
    assert.equal(errorCode(await read), 'ABORTED');
    assert.ok(
      Buffer.from(target.subarray(0, DATA.length - 1000)).equals(DATA.subarray(0, DATA.length - 1000)),
    );
    await server.allClosed();
  } finally {
    await origin.close();
    await server.close();
  }
});

test('a read queued for a busy pool can be aborted, and close fails the one in flight', async () => {
  const server = await startRawServer(() => undefined);
  const origin = originFor(server, { connections: 1 });
  const controller = new AbortController();
  try {
    const stuck = rejection(readRange(origin, 0, 10));
    await until(() => server.requests.length === 1);
    const queued = rejection(origin.readInto(FILE, 0, new Uint8Array(10), { signal: controller.signal }));
    controller.abort();
    assert.equal(errorCode(await queued), 'ABORTED');
    assert.equal(server.connections(), 1);
    await origin.close();
    assert.equal(errorCode(await stuck), 'ORIGIN_IO');
    await server.allClosed();
  } finally {
    await origin.close();
    await server.close();
  }
});

test('pipelined: a read behind a busy socket is written at once and answered in order, byte-exact', async () => {
  // The first request is answered at once; later ones only once two are waiting, so the second
  // read can finish only if it was written before the first was answered.
  const held: RawRequest[] = [];
  const server = await startRawServer((request) => {
    if (request.index === 1) return void request.socket.write(partialResponse(request.range));
    held.push(request);
    if (held.length < 2) return;
    for (const waiting of held.splice(0)) waiting.socket.write(partialResponse(waiting.range));
  });
  // One socket; the first exchange proves it keeps alive, and only then are requests pipelined.
  const origin = originFor(server, { connections: 1, pipeline: 2 });
  try {
    assert.ok((await readRange(origin, 0, 1000)).equals(DATA.subarray(0, 1000)));
    const [a, b] = await Promise.all([readRange(origin, 10, 100_000), readRange(origin, 200_000, 50_000)]);
    assert.ok(a.equals(DATA.subarray(10, 100_010)));
    assert.ok(b.equals(DATA.subarray(200_000, 250_000)));
    assert.deepEqual(
      server.requests.map((request) => request.connection),
      [1, 1, 1],
    );
    assert.equal(origin.stats.retries, 0);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('pipelined: without `pipeline` the second read waits for the socket', async () => {
  const held: RawRequest[] = [];
  const server = await startRawServer((request) => {
    if (request.index === 2) held.push(request);
    else request.socket.write(partialResponse(request.range));
  });
  const origin = originFor(server, { connections: 1 });
  try {
    await readRange(origin, 0, 10);
    const first = readRange(origin, 0, 250_000);
    const second = readRange(origin, 5, 10);
    await until(() => held.length === 1);
    await sleepMs(50);
    assert.equal(server.requests.length, 2, 'the second request is not sent while the first is unanswered');
    for (const request of held) request.socket.write(partialResponse(request.range));
    assert.ok((await first).equals(DATA.subarray(0, 250_000)));
    assert.ok((await second).equals(DATA.subarray(5, 15)));
    assert.equal(server.connections(), 1);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('pipelined: small answers written together land each in its own target', async () => {
  let heldBack: RawRequest | undefined;
  const server = await startRawServer((request) => {
    if (request.index === 2) {
      heldBack = request;
      return;
    }
    // Both answers in one write: they arrive in one read.
    if (request.index === 3 && heldBack !== undefined) {
      request.socket.write(Buffer.concat([partialResponse(heldBack.range), partialResponse(request.range)]));
      return;
    }
    request.socket.write(partialResponse(request.range));
  });
  const origin = originFor(server, { connections: 1, pipeline: 2 });
  try {
    await readRange(origin, 0, 1);
    const [a, b] = await Promise.all([readRange(origin, 100, 7), readRange(origin, 300, 9)]);
    assert.ok(a.equals(DATA.subarray(100, 107)));
    assert.ok(b.equals(DATA.subarray(300, 309)));
    assert.equal(server.connections(), 1, 'the socket stays in use');
    assert.ok((await readRange(origin, 1, 2)).equals(DATA.subarray(1, 3)));
    assert.equal(server.connections(), 1);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('pipelined: aborting the read behind leaves the one in flight whole and closes the socket after it', async () => {
  const held: RawRequest[] = [];
  const server = await startRawServer((request) => {
    if (request.index === 2 || request.index === 3) held.push(request);
    else request.socket.write(partialResponse(request.range));
  });
  const origin = originFor(server, { connections: 1, pipeline: 2 });
  const controller = new AbortController();
  const behind = new Uint8Array(1000);
  try {
    await readRange(origin, 0, 1);
    const current = readRange(origin, 0, 100_000);
    const aborted = rejection(origin.readInto(FILE, 5000, behind, { signal: controller.signal }));
    await until(() => held.length === 2);
    controller.abort();
    assert.equal(errorCode(await aborted), 'ABORTED');
    // Both answers go out; the second must not land in the aborted read's target.
    for (const request of held) request.socket.write(partialResponse(request.range));
    assert.ok((await current).equals(DATA.subarray(0, 100_000)));
    assert.deepEqual(behind, new Uint8Array(1000));
    await server.allClosed();
    assert.ok((await readRange(origin, 7, 3)).equals(DATA.subarray(7, 10)));
    assert.equal(server.connections(), 2, 'a fresh socket after the one closed');
  } finally {
    await origin.close();
    await server.close();
  }
});

test('pipelined: when the answer in flight fails, the read behind it is sent again on a fresh socket', async () => {
  const server = await startRawServer((request) => {
    if (request.index === 1) return void request.socket.write(partialResponse(request.range));
    if (request.index === 3) {
      // The answer to request 2 is cut short: its socket closes with request 3 unanswered.
      const whole = partialResponse(server.requests[1]?.range);
      request.socket.end(whole.subarray(0, 5000));
      return;
    }
    if (request.index > 3) request.socket.write(partialResponse(request.range));
  });
  const origin = originFor(server, { connections: 1, pipeline: 2, retries: 0 });
  try {
    await readRange(origin, 0, 1);
    const cut = rejection(readRange(origin, 0, 100_000));
    const resent = readRange(origin, 1000, 2000);
    const cutError = await cut;
    assert.equal(errorCode((cutError as WeightcastError).cause), 'ORIGIN_SHORT_READ', String(cutError));
    assert.ok((await resent).equals(DATA.subarray(1000, 3000)));
    assert.equal(server.requests.length, 4, 'the unanswered read went once more');
    assert.equal(server.requests[3]?.connection, 2);
  } finally {
    await origin.close();
    await server.close();
  }
});

test('pipelined: the file server (node:http) answers reads pipelined two deep on one socket, byte-exact', async () => {
  const size = 2 * 1024 * 1024 + 7;
  const model = await makeTempModel({ [FILE]: size });
  const server = await serve(model.dir);
  const origin = new HttpOrigin(server.url, { connections: 1, pipeline: 2 });
  const expected = fileBytes(model, FILE);
  try {
    await readRange(origin, 0, 1);
    const ranges: [number, number][] = [];
    let seed = 777;
    for (let index = 0; index < 30; index++) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      const offset = seed % size;
      ranges.push([offset, 1 + (seed % Math.min(600_000, size - offset))]);
    }
    const together = await Promise.all(ranges.map(([offset, length]) => readRange(origin, offset, length)));
    together.forEach((bytes, index) => {
      const [offset, length] = ranges[index] ?? [0, 0];
      assert.ok(bytes.equals(expected.subarray(offset, offset + length)), `${offset}+${length}`);
    });
    assert.equal(server.stats.connections, 1, 'one socket, requests pipelined on it');
    assert.equal(origin.stats.retries, 0);
  } finally {
    await origin.close();
    await server.close();
    await model.remove();
  }
});
