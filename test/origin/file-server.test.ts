import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { request, type IncomingHttpHeaders } from 'node:http';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { isWeightcastError } from '../../src/errors.js';
import { parseRange, type FaultRequest } from '../../src/origin/file-server.js';
import { main, parseFileServerArgs } from '../../src/origin/file-server-main.js';
import { fileBytes, makeTempModel, serve } from './helpers.js';

interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** One request on a fresh connection, with the path sent exactly as given. */
async function fetchRaw(
  baseUrl: string,
  path: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<RawResponse> {
  const url = new URL(baseUrl);
  const req = request({ host: url.hostname, port: url.port, path, method, headers, agent: false });
  req.end();
  const [response] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
  const chunks: Buffer[] = [];
  for await (const chunk of response) chunks.push(chunk as Buffer);
  return { status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) };
}

test('parseRange resolves the three single-range forms against the size', () => {
  assert.deepEqual(parseRange('bytes=0-9', 100), { kind: 'range', start: 0, end: 9 });
  assert.deepEqual(parseRange('bytes=90-200', 100), { kind: 'range', start: 90, end: 99 });
  assert.deepEqual(parseRange('bytes=95-', 100), { kind: 'range', start: 95, end: 99 });
  assert.deepEqual(parseRange('bytes=-10', 100), { kind: 'range', start: 90, end: 99 });
  assert.deepEqual(parseRange('bytes=-500', 100), { kind: 'range', start: 0, end: 99 });
  assert.deepEqual(parseRange('bytes=100-', 100), { kind: 'unsatisfiable' });
  assert.deepEqual(parseRange('bytes=5-4', 100), { kind: 'unsatisfiable' });
  assert.deepEqual(parseRange('bytes=-0', 100), { kind: 'unsatisfiable' });
  assert.deepEqual(parseRange('bytes=0-1,5-6', 100), { kind: 'none' });
  assert.deepEqual(parseRange('items=0-1', 100), { kind: 'none' });
  assert.deepEqual(parseRange(undefined, 100), { kind: 'none' });
  assert.deepEqual(parseRange('bytes=3-7', undefined), { kind: 'range', start: 3, end: 7 });
});

test('the file server answers ranges, HEAD and errors byte-exactly', async () => {
  const model = await makeTempModel({ 'a/weights.bin': 300_000, 'empty.bin': 0 });
  const server = await serve(model.dir);
  const expected = fileBytes(model, 'a/weights.bin');
  try {
    const whole = await fetchRaw(server.url, '/a/weights.bin');
    assert.equal(whole.status, 200);
    assert.equal(whole.headers['content-length'], '300000');
    assert.deepEqual(whole.body, expected);

    const part = await fetchRaw(server.url, '/a/weights.bin', { range: 'bytes=1000-1999' });
    assert.equal(part.status, 206);
    assert.equal(part.headers['content-range'], 'bytes 1000-1999/300000');
    assert.deepEqual(part.body, expected.subarray(1000, 2000));

    const tail = await fetchRaw(server.url, '/a/weights.bin', { range: 'bytes=-7' });
    assert.deepEqual(tail.body, expected.subarray(-7));

    const beyond = await fetchRaw(server.url, '/a/weights.bin', { range: 'bytes=300000-' });
    assert.equal(beyond.status, 416);
    assert.equal(beyond.headers['content-range'], 'bytes */300000');

    const head = await fetchRaw(server.url, '/a/weights.bin', {}, 'HEAD');
    assert.equal(head.status, 200);
    assert.equal(head.headers['content-length'], '300000');
    assert.equal(head.body.length, 0);

    const empty = await fetchRaw(server.url, '/empty.bin');
    assert.equal(empty.status, 200);
    assert.equal(empty.body.length, 0);

    assert.equal((await fetchRaw(server.url, '/missing.bin')).status, 404);
    assert.equal((await fetchRaw(server.url, '/a')).status, 404);
    assert.equal((await fetchRaw(server.url, '/a/weights.bin', {}, 'POST')).status, 405);
    // The URL parser folds dot segments into the root; encoded slashes and NULs are refused.
    assert.equal((await fetchRaw(server.url, '/%2e%2e/etc/passwd')).status, 404);
    assert.equal((await fetchRaw(server.url, '/a%2F..%2F..%2Fx')).status, 400);
    assert.equal((await fetchRaw(server.url, '/x%00')).status, 400);
    assert.equal((await fetchRaw(server.url, '/a%5C..%5Cx')).status, 400);
    assert.equal(server.stats.requests, 13);
    assert.equal(server.stats.bytesSent, 300_000 + 1000 + 7);
  } finally {
    await server.close();
    await model.remove();
  }
});

test('a body of several read buffers arrives whole, and a client leaving mid-body stalls no one', async () => {
  const size = 3 * 1024 * 1024 + 12_345;
  const model = await makeTempModel({ 'big.bin': size });
  const server = await serve(model.dir);
  const expected = fileBytes(model, 'big.bin');
  try {
    // A client that reads the first bytes of the body and leaves.
    const url = new URL(server.url);
    const leaving = request({ host: url.hostname, port: url.port, path: '/big.bin', agent: false });
    leaving.end();
    const [response] = (await once(leaving, 'response')) as [import('node:http').IncomingMessage];
    await once(response, 'data');
    leaving.destroy();
    for (let round = 0; round < 3; round++) {
      const whole = await fetchRaw(server.url, '/big.bin');
      assert.equal(whole.status, 200);
      assert.ok(whole.body.equals(expected), `round ${round}: the whole file`);
    }
    const across = await fetchRaw(server.url, '/big.bin', { range: 'bytes=1048000-2097999' });
    assert.equal(across.status, 206);
    assert.ok(across.body.equals(expected.subarray(1_048_000, 2_098_000)));
  } finally {
    await server.close();
    await model.remove();
  }
});

test('the file server requires the bearer token when it has one', async () => {
  const model = await makeTempModel({ 'x.bin': 10 });
  const server = await serve(model.dir, undefined, 'sesame');
  try {
    assert.equal((await fetchRaw(server.url, '/x.bin')).status, 401);
    assert.equal((await fetchRaw(server.url, '/x.bin', { authorization: 'Bearer wrong' })).status, 401);
    const ok = await fetchRaw(server.url, '/x.bin', { authorization: 'Bearer sesame' });
    assert.deepEqual(ok.body, fileBytes(model, 'x.bin'));
  } finally {
    await server.close();
    await model.remove();
  }
});

test('fault hook sees counted requests and can corrupt, cut and redirect', async () => {
  const model = await makeTempModel({ 'x.bin': 200_000 });
  const seen: FaultRequest[] = [];
  const server = await serve(model.dir, (request) => {
    seen.push(request);
    if (request.range?.start === 0) return { kind: 'corrupt', offset: 5 };
    if (request.range?.start === 10) return { kind: 'reset', afterBytes: 1000 };
    if (request.method === 'HEAD') return { kind: 'redirect', location: '/elsewhere', linkedSize: 42 };
    return request.count === 1 ? { kind: 'status', status: 503, retryAfter: '7' } : undefined;
  });
  const expected = fileBytes(model, 'x.bin');
  try {
    const corrupt = await fetchRaw(server.url, '/x.bin', { range: 'bytes=0-99' });
    assert.equal(corrupt.status, 206);
    assert.equal(corrupt.body[5], (expected[5] ?? 0) ^ 0xff);
    assert.deepEqual(corrupt.body.subarray(6), expected.subarray(6, 100));

    await assert.rejects(fetchRaw(server.url, '/x.bin', { range: 'bytes=10-99999' }));

    const redirect = await fetchRaw(server.url, '/x.bin', {}, 'HEAD');
    assert.equal(redirect.status, 302);
    assert.equal(redirect.headers.location, '/elsewhere');
    assert.equal(redirect.headers['x-linked-size'], '42');

    const busy = await fetchRaw(server.url, '/x.bin');
    assert.equal(busy.status, 503);
    assert.equal(busy.headers['retry-after'], '7');
    assert.deepEqual((await fetchRaw(server.url, '/x.bin')).body, expected);
    assert.deepEqual(
      seen.map((request) => [request.method, request.range?.start, request.count]),
      [
        ['GET', 0, 1],
        ['GET', 10, 1],
        ['HEAD', undefined, 1],
        ['GET', undefined, 1],
        ['GET', undefined, 2],
      ],
    );
  } finally {
    await server.close();
    await model.remove();
  }
});

test('file server arguments are parsed and checked', () => {
  assert.deepEqual(parseFileServerArgs(['--root', 'models', '--port', '8080']), {
    root: 'models',
    port: 8080,
  });
  assert.throws(
    () => parseFileServerArgs([]),
    (error: unknown) => isWeightcastError(error, 'USAGE'),
  );
  assert.throws(
    () => parseFileServerArgs(['--root', 'm', '--port', '70000']),
    (error: unknown) => isWeightcastError(error, 'USAGE'),
  );
});

test('main starts a server and announces its URL as one JSON line', async () => {
  const model = await makeTempModel({ 'x.bin': 100 });
  const lines: string[] = [];
  const server = await main(['--root', model.dir], (line) => lines.push(line));
  try {
    assert.equal(lines.length, 1);
    assert.deepEqual(JSON.parse(lines[0] ?? ''), { url: server.url });
    assert.deepEqual((await fetchRaw(server.url, '/x.bin')).body, fileBytes(model, 'x.bin'));
  } finally {
    await server.close();
    await model.remove();
  }
});

test('the file server runs as a child process', async () => {
  const model = await makeTempModel({ 'x.bin': 1000 });
  const script = fileURLToPath(new URL('../../src/origin/file-server-main.js', import.meta.url));
  const child = spawn(process.execPath, [script, '--root', model.dir], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const lines = createInterface({ input: child.stdout });
    const [line] = (await once(lines, 'line')) as [string];
    const { url } = JSON.parse(line) as { url: string };
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
    assert.deepEqual((await fetchRaw(url, '/x.bin')).body, fileBytes(model, 'x.bin'));
  } finally {
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    await exited;
    await model.remove();
  }
});
