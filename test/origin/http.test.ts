import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleepMs } from 'node:timers/promises';
import { isWeightcastError, type WeightcastError } from '../../src/errors.js';
import type { FaultHook, FaultRequest } from '../../src/origin/file-server.js';
import type { ReadProgress } from '../../src/origin/origin.js';
import {
  HttpOrigin,
  parseContentRange,
  type HttpOriginOptions,
  type RetryEvent,
} from '../../src/origin/http.js';
import { FIRST_CONTACT_BUDGET_MS } from '../../src/origin/retry.js';
import { freePort } from '../helpers/fixtures.js';
import { fileBytes, makeTempModel, rejection, serve, type TempModel } from './helpers.js';

const WEIGHTS = 'weights.safetensors';
const SIZE = 3 * 1024 * 1024 + 17;

type Transport = NonNullable<HttpOriginOptions['transport']>;

/** Registers the test once per transport: reads in place ('auto', the default) and through undici. */
function bothTransports(
  name: string,
  body: (transport: Transport) => Promise<void>,
  options: { timeout?: number } = {},
): void {
  for (const transport of ['auto', 'undici'] as const) {
    test(`${name} [${transport}]`, options, () => body(transport));
  }
}

/** A model with one random file, a server with `faults`, and an origin with zero-jitter backoff. */
async function setup(
  transport: Transport,
  faults?: FaultHook,
  options: HttpOriginOptions = {},
  token?: string,
): Promise<{
  model: TempModel;
  origin: HttpOrigin;
  retries: RetryEvent[];
  url: string;
  done: () => Promise<void>;
}> {
  const model = await makeTempModel({ [WEIGHTS]: SIZE });
  const server = await serve(model.dir, faults, token);
  const retries: RetryEvent[] = [];
  const origin = new HttpOrigin(server.url, {
    transport,
    random: () => 0,
    onRetry: (event) => retries.push(event),
    ...options,
  });
  const done = async (): Promise<void> => {
    await origin.close();
    await server.close();
    await model.remove();
  };
  return { model, origin, retries, url: server.url, done };
}

async function readAll(origin: HttpOrigin, path: string, size: number): Promise<Buffer> {
  const target = new Uint8Array(size);
  await origin.readInto(path, 0, target);
  return Buffer.from(target);
}

function errorCode(error: unknown): string {
  return isWeightcastError(error) ? error.code : `not a WeightcastError: ${String(error)}`;
}

bothTransports('ranged reads are byte-exact', async (transport) => {
  const { model, origin, done } = await setup(transport);
  const expected = fileBytes(model, WEIGHTS);
  try {
    assert.deepEqual(await origin.stat(WEIGHTS), { path: WEIGHTS, size: SIZE });
    const ranges = [
      [0, 1],
      [0, SIZE],
      [1_000_003, 1_500_000],
      [SIZE - 1, 1],
      [7, 0],
    ] as const;
    for (const [offset, length] of ranges) {
      const target = new Uint8Array(length);
      await origin.readInto(WEIGHTS, offset, target);
      assert.ok(
        Buffer.from(target).equals(expected.subarray(offset, offset + length)),
        `${offset}+${length}`,
      );
    }
    assert.equal(origin.stats.bytesRead, 1 + SIZE + 1_500_000 + 1);
    assert.equal(origin.stats.requests, 5);
    assert.equal(origin.stats.retries, 0);
  } finally {
    await done();
  }
});

bothTransports('reads past the end of the file fail as short reads without retries', async (transport) => {
  const { origin, retries, done } = await setup(transport);
  try {
    const error = await rejection(origin.readInto(WEIGHTS, SIZE, new Uint8Array(10)));
    assert.equal(errorCode(error), 'ORIGIN_SHORT_READ');
    assert.equal(retries.length, 0);
  } finally {
    await done();
  }
});

bothTransports('503 with Retry-After is retried after the delay the server asked for', async (transport) => {
  const { model, origin, retries, done } = await setup(transport, (request) =>
    request.method === 'GET' && request.count === 1
      ? { kind: 'status', status: 503, retryAfter: '1' }
      : undefined,
  );
  try {
    assert.ok((await readAll(origin, WEIGHTS, SIZE)).equals(fileBytes(model, WEIGHTS)));
    assert.deepEqual(
      retries.map((event) => [event.path, event.attempt, event.delayMs, event.error.code]),
      [[WEIGHTS, 1, 1000, 'ORIGIN_HTTP_STATUS']],
    );
    assert.equal(origin.stats.retries, 1);
    assert.equal(origin.stats.requests, 2);
  } finally {
    await done();
  }
});

bothTransports('Retry-After is capped by retryAfterMaxMs and 429 is retried', async (transport) => {
  const { model, origin, retries, done } = await setup(
    transport,
    (request) => (request.count <= 2 ? { kind: 'status', status: 429, retryAfter: '3600' } : undefined),
    { retryAfterMaxMs: 20 },
  );
  try {
    assert.deepEqual(await origin.stat(WEIGHTS), { path: WEIGHTS, size: SIZE });
    assert.ok((await readAll(origin, WEIGHTS, SIZE)).equals(fileBytes(model, WEIGHTS)));
    assert.deepEqual(
      retries.map((event) => [event.attempt, event.delayMs]),
      [
        [1, 20],
        [2, 20],
        [1, 20],
        [2, 20],
      ],
    );
  } finally {
    await done();
  }
});

bothTransports('a connection reset mid-body is retried for the missing bytes only', async (transport) => {
  const asked: FaultRequest[] = [];
  const { model, origin, retries, done } = await setup(transport, (request) => {
    asked.push(request);
    return asked.length === 1 ? { kind: 'reset', afterBytes: 100_000 } : undefined;
  });
  try {
    assert.ok((await readAll(origin, WEIGHTS, SIZE)).equals(fileBytes(model, WEIGHTS)));
    assert.equal(retries.length, 1);
    assert.equal(retries[0]?.error.details.retryable, true);
    assert.equal(asked.length, 2);
    assert.deepEqual(asked[0]?.range, { start: 0, end: SIZE - 1 });
    const resumedAt = asked[1]?.range?.start ?? 0;
    assert.ok(resumedAt > 0 && resumedAt <= 100_000, `resumed at ${resumedAt}`);
    assert.deepEqual(asked[1]?.range, { start: resumedAt, end: SIZE - 1 });
    assert.ok(origin.stats.bytesRead >= SIZE);
  } finally {
    await done();
  }
});

bothTransports('a stalled body hits the idle timeout and the retry succeeds', async (transport) => {
  let stalls = 0;
  const { model, origin, retries, done } = await setup(
    transport,
    () => (stalls++ === 0 ? { kind: 'stall', afterBytes: 65_536, ms: 60_000 } : undefined),
    { bodyIdleTimeoutMs: 200 },
  );
  try {
    assert.ok((await readAll(origin, WEIGHTS, SIZE)).equals(fileBytes(model, WEIGHTS)));
    assert.deepEqual(
      retries.map((event) => event.error.code),
      ['ORIGIN_TIMEOUT'],
    );
  } finally {
    await done();
  }
});

bothTransports('persistent 503s exhaust the retries and keep the last cause', async (transport) => {
  const { origin, retries, done } = await setup(transport, () => ({ kind: 'status', status: 503 }), {
    retries: 2,
  });
  try {
    const error = await rejection(origin.readInto(WEIGHTS, 0, new Uint8Array(10)));
    assert.equal(errorCode(error), 'ORIGIN_RETRIES_EXHAUSTED');
    const cause = (error as WeightcastError).cause;
    assert.ok(isWeightcastError(cause, 'ORIGIN_HTTP_STATUS'));
    assert.equal(cause.details.status, 503);
    assert.equal(retries.length, 2);
    assert.equal(origin.stats.requests, 3);
  } finally {
    await done();
  }
});

bothTransports(
  '404 is ORIGIN_NOT_FOUND and other 4xx are ORIGIN_HTTP_STATUS, neither retried',
  async (transport) => {
    const { origin, retries, done } = await setup(transport, (request) =>
      request.path === 'forbidden.bin' ? { kind: 'status', status: 403 } : undefined,
    );
    try {
      assert.equal(
        errorCode(await rejection(origin.readInto('missing.bin', 0, new Uint8Array(4)))),
        'ORIGIN_NOT_FOUND',
      );
      assert.equal(errorCode(await rejection(origin.stat('missing.bin'))), 'ORIGIN_NOT_FOUND');
      const forbidden = await rejection(origin.readInto('forbidden.bin', 0, new Uint8Array(4)));
      assert.equal(errorCode(forbidden), 'ORIGIN_HTTP_STATUS');
      assert.equal((forbidden as WeightcastError).details.status, 403);
      assert.equal(retries.length, 0);
      assert.equal(origin.stats.requests, 3);
    } finally {
      await done();
    }
  },
);

bothTransports('unsafe paths are refused before any request', async (transport) => {
  const { origin, done } = await setup(transport);
  try {
    for (const path of ['../etc/passwd', '/abs', 'a/../../b']) {
      assert.equal(errorCode(await rejection(origin.stat(path))), 'MANIFEST_UNSAFE_PATH');
    }
    assert.equal(origin.stats.requests, 0);
  } finally {
    await done();
  }
});

bothTransports(
  'the token goes to the base origin only; redirects to another origin work without it',
  async (transport) => {
    const model = await makeTempModel({ [WEIGHTS]: SIZE });
    const cdnSeen: FaultRequest[] = [];
    let cdnRefusals = 0;
    const cdn = await serve(model.dir, (request) => {
      cdnSeen.push(request);
      // The third request plays an expired signed URL: the origin must go back to the hub once.
      return request.range !== undefined && ++cdnRefusals === 3 ? { kind: 'status', status: 403 } : undefined;
    });
    const hubSeen: FaultRequest[] = [];
    const hub = await serve(
      model.dir,
      (request) => {
        hubSeen.push(request);
        const file = request.path.replace('org/model/resolve/main/', '');
        return { kind: 'redirect', location: `${cdn.url}${file}?signed=1`, linkedSize: SIZE };
      },
      'hub-token',
    );
    const origin = new HttpOrigin(`${hub.url}org/model/resolve/main`, { token: 'hub-token', transport });
    try {
      assert.deepEqual(await origin.stat(WEIGHTS), { path: WEIGHTS, size: SIZE });
      const expected = fileBytes(model, WEIGHTS);
      for (const offset of [0, 1000, 2000]) {
        const target = new Uint8Array(500);
        await origin.readInto(WEIGHTS, offset, target);
        assert.ok(Buffer.from(target).equals(expected.subarray(offset, offset + 500)));
      }
      assert.ok(hubSeen.every((request) => request.authorization === 'Bearer hub-token'));
      assert.ok(hubSeen.every((request) => request.path === `org/model/resolve/main/${WEIGHTS}`));
      assert.ok(cdnSeen.every((request) => request.authorization === undefined));
      // stat and the re-resolution after the 403 went through the hub; the other reads used the cached target.
      assert.equal(hubSeen.length, 2);
      assert.deepEqual(
        cdnSeen.map((request) => [request.method, request.range?.start]),
        [
          ['HEAD', undefined],
          ['GET', 0],
          ['GET', 1000],
          ['GET', 2000],
          ['GET', 2000],
        ],
      );
      assert.equal(origin.stats.retries, 0);
    } finally {
      await origin.close();
      await hub.close();
      await cdn.close();
      await model.remove();
    }
  },
);

bothTransports(
  'stat prefers X-Linked-Size and falls back to a one-byte range when HEAD is refused',
  async (transport) => {
    const { origin, done } = await setup(transport, (request) => {
      if (request.path === 'linked.bin')
        return { kind: 'redirect', location: `/${WEIGHTS}`, linkedSize: 12345 };
      if (request.method === 'HEAD') return { kind: 'status', status: 405 };
      return undefined;
    });
    try {
      assert.deepEqual(await origin.stat('linked.bin'), { path: 'linked.bin', size: 12345 });
      assert.deepEqual(await origin.stat(WEIGHTS), { path: WEIGHTS, size: SIZE });
    } finally {
      await done();
    }
  },
);

bothTransports('a redirect loop fails with ORIGIN_TOO_MANY_REDIRECTS', async (transport) => {
  const { origin, retries, done } = await setup(transport, (request) => ({
    kind: 'redirect',
    location: `/${request.path}`,
    status: 307,
  }));
  try {
    assert.equal(
      errorCode(await rejection(origin.readInto(WEIGHTS, 0, new Uint8Array(8)))),
      'ORIGIN_TOO_MANY_REDIRECTS',
    );
    assert.equal(origin.stats.requests, 6);
    assert.equal(retries.length, 0);
  } finally {
    await done();
  }
});

bothTransports('a server that wants a token answers 401 without one', async (transport) => {
  const { origin, done } = await setup(transport, undefined, {}, 'needed');
  try {
    const error = await rejection(origin.stat(WEIGHTS));
    assert.equal(errorCode(error), 'ORIGIN_HTTP_STATUS');
    assert.equal((error as WeightcastError).details.status, 401);
  } finally {
    await done();
  }
});

bothTransports('list reads the index, its shards and the companions that exist', async (transport) => {
  const index = JSON.stringify({
    metadata: { total_size: 300 },
    weight_map: {
      'a.weight': 'model-00001-of-00002.safetensors',
      'b.weight': 'model-00002-of-00002.safetensors',
      'c.weight': 'model-00001-of-00002.safetensors',
    },
  });
  const model = await makeTempModel({
    'model.safetensors.index.json': index,
    'model-00001-of-00002.safetensors': 200,
    'model-00002-of-00002.safetensors': 100,
    'config.json': '{}',
    'tokenizer.json': '{"x":1}',
    'unrelated.txt': 'not listed',
  });
  const server = await serve(model.dir);
  const origin = new HttpOrigin(server.url, { connections: 2, transport });
  try {
    assert.deepEqual(await origin.list(), [
      { path: 'config.json', size: 2 },
      { path: 'model-00001-of-00002.safetensors', size: 200 },
      { path: 'model-00002-of-00002.safetensors', size: 100 },
      { path: 'model.safetensors.index.json', size: index.length },
      { path: 'tokenizer.json', size: 7 },
    ]);
  } finally {
    await origin.close();
    await server.close();
    await model.remove();
  }
});

bothTransports(
  'list falls back to model.safetensors, and to a clear error when there is neither',
  async (transport) => {
    const model = await makeTempModel({ 'model.safetensors': 64, 'merges.txt': 'ab' });
    const server = await serve(model.dir);
    const origin = new HttpOrigin(server.url, { transport });
    const empty = await makeTempModel({ 'something.bin': 1 });
    const emptyServer = await serve(empty.dir);
    const emptyOrigin = new HttpOrigin(emptyServer.url, { transport });
    try {
      assert.deepEqual(await origin.list(), [
        { path: 'merges.txt', size: 2 },
        { path: 'model.safetensors', size: 64 },
      ]);
      const error = await rejection(emptyOrigin.list());
      assert.equal(errorCode(error), 'ORIGIN_NO_LISTING');
      assert.match((error as Error).message, /--manifest/);
    } finally {
      await Promise.all([origin.close(), emptyOrigin.close(), server.close(), emptyServer.close()]);
      await Promise.all([model.remove(), empty.remove()]);
    }
  },
);

bothTransports('list returns the given files without any request', async (transport) => {
  const { origin, done } = await setup(transport, undefined, {
    files: [
      { path: 'b.bin', size: 2 },
      { path: 'a.bin', size: 1 },
    ],
  });
  try {
    assert.deepEqual(await origin.list(), [
      { path: 'a.bin', size: 1 },
      { path: 'b.bin', size: 2 },
    ]);
    assert.equal(origin.stats.requests, 0);
  } finally {
    await done();
  }
});

bothTransports(
  'aborting mid-body rejects with ABORTED at once',
  async (transport) => {
    const controller = new AbortController();
    const { origin, done } = await setup(transport, () => ({
      kind: 'stall',
      afterBytes: 65_536,
      ms: 60_000,
    }));
    try {
      const read = rejection(
        origin.readInto(WEIGHTS, 0, new Uint8Array(SIZE), { signal: controller.signal }),
      );
      // Wait (boundedly) until part of the body has arrived, so the abort lands inside the body.
      for (let tick = 0; tick < 2000 && origin.stats.bytesRead === 0; tick++) await sleepMs(5);
      assert.ok(origin.stats.bytesRead > 0);
      controller.abort(new Error('user cancelled'));
      assert.equal(errorCode(await read), 'ABORTED');
    } finally {
      await done();
    }
  },
  { timeout: 20_000 },
);

bothTransports(
  'aborting during a backoff sleep rejects with ABORTED at once',
  async (transport) => {
    const controller = new AbortController();
    const { origin, done } = await setup(
      transport,
      () => ({ kind: 'status', status: 503, retryAfter: '30' }),
      {
        onRetry: () => controller.abort(),
      },
    );
    try {
      const error = await rejection(origin.stat(WEIGHTS, { signal: controller.signal }));
      assert.equal(errorCode(error), 'ABORTED');
      assert.equal(origin.stats.requests, 1);
    } finally {
      await done();
    }
  },
  { timeout: 20_000 },
);

test('parseContentRange reads the three forms', () => {
  assert.deepEqual(parseContentRange('bytes 0-99/1000'), { start: 0, end: 99, size: 1000 });
  assert.deepEqual(parseContentRange('bytes 5-9/*'), { start: 5, end: 9, size: undefined });
  assert.deepEqual(parseContentRange('bytes */1000'), { start: undefined, end: undefined, size: 1000 });
  assert.equal(parseContentRange('items 0-1/2'), undefined);
  assert.equal(parseContentRange(undefined), undefined);
});

bothTransports(
  'readInto counts landed bytes in a caller progress object while the read runs',
  async (transport) => {
    const STALL_AFTER = 512 * 1024;
    let asked = 0;
    const { model, origin, done } = await setup(transport, () =>
      asked++ === 0 ? { kind: 'stall', afterBytes: STALL_AFTER, ms: 300 } : undefined,
    );
    try {
      const target = Buffer.alloc(2 * 1024 * 1024);
      const progress = { filled: -1 };
      const read = origin.readInto(WEIGHTS, 4096, target, { progress });
      // Bounded wait for the stalled read to have landed the bytes before the stall.
      for (let i = 0; i < 100 && progress.filled < STALL_AFTER; i++) await sleepMs(5);
      assert.equal(progress.filled, STALL_AFTER, 'the bytes before the stall are counted while it lasts');
      await read;
      assert.equal(progress.filled, target.length);
      assert.deepEqual(target, fileBytes(model, WEIGHTS).subarray(4096, 4096 + target.length));
    } finally {
      await done();
    }
  },
);

bothTransports(
  'a read calls its watcher once its landed bytes reach the mark, and may be watched again',
  async (transport) => {
    const { origin, done } = await setup(transport, () => undefined);
    try {
      const target = Buffer.alloc(2 * 1024 * 1024);
      // Each call: [filled when called, the mark it was set for]. A read may land many bytes at once
      // (straight into the buffer), so one call may pass several marks: it comes at the first read
      // that reaches its mark, never before.
      const seen: Array<[number, number]> = [];
      let mark = 256 * 1024;
      const progress: ReadProgress = { filled: 0, watchAt: mark };
      progress.onWatch = () => {
        seen.push([progress.filled, mark]);
        if (progress.filled < target.length) {
          mark = Math.min(target.length, progress.filled + 512 * 1024);
          progress.watchAt = mark;
        }
      };
      await origin.readInto(WEIGHTS, 0, target, { progress });
      assert.ok(seen.length >= 2, `the watcher ran ${seen.length} times`);
      for (const [filled, at] of seen) assert.ok(filled >= at, `called at ${filled}, before its mark ${at}`);
      assert.equal(seen.at(-1)?.[0], target.length, 'the last mark is the last byte');
      assert.equal(progress.watchAt, undefined, 'a mark is cleared when it fires');
    } finally {
      await done();
    }
  },
);

bothTransports('a retried read keeps counting from the bytes it already has', async (transport) => {
  let asked = 0;
  const { origin, retries, done } = await setup(transport, () =>
    asked++ === 0 ? { kind: 'reset', afterBytes: 300_000 } : undefined,
  );
  try {
    const progress = { filled: 0 };
    const target = Buffer.alloc(1024 * 1024);
    await origin.readInto(WEIGHTS, 0, target, { progress });
    assert.equal(retries.length, 1);
    assert.equal(progress.filled, target.length, 'never counts a byte twice');
  } finally {
    await done();
  }
});

bothTransports(
  'a read notes when its first byte landed, after any wait for the connection',
  async (transport) => {
    const STALL_MS = 150;
    // The first read stalls mid-body; the second waits behind it for the origin's one connection.
    const stallFirst: FaultHook = (request) =>
      request.range?.start === 0 ? { kind: 'stall', afterBytes: 1024, ms: STALL_MS } : undefined;
    const { origin, done } = await setup(transport, stallFirst, { connections: 1 });
    try {
      let calls = 0;
      const onFirstByte = (): void => void calls++;
      const first: ReadProgress = { filled: 0, onFirstByte };
      const second: ReadProgress = { filled: 0, onFirstByte };
      const startedMs = performance.now();
      await Promise.all([
        origin.readInto(WEIGHTS, 0, new Uint8Array(64 * 1024), { progress: first }),
        origin.readInto(WEIGHTS, 1024 * 1024, new Uint8Array(64 * 1024), { progress: second }),
      ]);
      assert.equal(second.filled, 64 * 1024);
      assert.equal(calls, 2, 'onFirstByte: once per read');
      assert.ok(first.firstByteMs !== undefined && second.firstByteMs !== undefined);
      assert.ok(
        first.firstByteMs - startedMs < STALL_MS,
        `first byte after ${first.firstByteMs - startedMs} ms`,
      );
      assert.ok(
        second.firstByteMs - startedMs >= STALL_MS,
        `the queued read's first byte landed ${second.firstByteMs - startedMs} ms in, before the stall ended`,
      );
    } finally {
      await done();
    }
  },
);

bothTransports(
  'an address where nothing ever answered fails within the first-contact budget',
  async (transport) => {
    const url = `http://127.0.0.1:${await freePort()}/`;
    const retries: RetryEvent[] = [];
    // The default outage budget (60 s): first contact cuts it short.
    const origin = new HttpOrigin(url, {
      transport,
      random: () => 0.5,
      onRetry: (event) => retries.push(event),
    });
    try {
      const error = await rejection(origin.readInto(WEIGHTS, 0, new Uint8Array(10)));
      assert.ok(isWeightcastError(error, 'ORIGIN_UNREACHABLE'), String(error));
      assert.match(error.message, new RegExp(`^nothing answered at ${url} \\(\\d+ tries in .*ECONNREFUSED`));
      assert.match(error.message, /check the URL's host and port$/);
      assert.equal(error.details.cause, 'ECONNREFUSED');
      assert.ok(Number(error.details.attempts) > 1, 'a few tries, not one');
      assert.ok(
        Number(error.details.elapsedMs) <= FIRST_CONTACT_BUDGET_MS + 1000,
        String(error.details.elapsedMs),
      );
      assert.ok(retries.length > 0 && retries.every((event) => event.budgetMs === FIRST_CONTACT_BUDGET_MS));
    } finally {
      await origin.close();
    }
  },
);

bothTransports(
  'an origin that answered once and then went away is an outage: the whole budget',
  async (transport) => {
    const model = await makeTempModel({ [WEIGHTS]: 1000 });
    const server = await serve(model.dir);
    const retries: RetryEvent[] = [];
    // A budget shorter than the first-contact one: only the error code tells the two apart.
    const origin = new HttpOrigin(server.url, {
      transport,
      retryBudgetMs: 1000,
      random: () => 0.5,
      onRetry: (event) => retries.push(event),
    });
    try {
      assert.ok((await readAll(origin, WEIGHTS, 100)).equals(fileBytes(model, WEIGHTS).subarray(0, 100)));
      // The server goes away; its port now refuses connections.
      await server.close();
      const error = await rejection(origin.readInto(WEIGHTS, 0, new Uint8Array(10)));
      assert.ok(isWeightcastError(error, 'ORIGIN_RETRIES_EXHAUSTED'), String(error));
      assert.match(error.message, /\(retry budget 1 s\); last: .*connect ECONNREFUSED/);
      assert.ok(retries.length > 0 && retries.every((event) => event.budgetMs === 1000));
    } finally {
      await origin.close();
      await server.close();
      await model.remove();
    }
  },
);
