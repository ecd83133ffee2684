import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isWeightcastError } from '../../src/errors.js';
import { callJson, readJsonBody, sendJson } from '../../src/swarm/wire/http-json.js';
import { listenOn } from '../../src/util/listen.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

/** A loopback server answering with `handler`; counts the connections it accepts. */
async function withServer(
  handler: Handler,
  body: (url: string, stats: { connections: number }) => Promise<void>,
): Promise<void> {
  const stats = { connections: 0 };
  const server = createServer((req, res) => void handler(req, res));
  server.on('connection', () => (stats.connections += 1));
  await listenOn(server, '127.0.0.1', 0);
  try {
    await body(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, stats);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

test('callJson: sends a JSON body, returns the JSON answer, keeps one connection for calls in a row', async () => {
  await withServer(
    async (req, res) => sendJson(res, 200, { method: req.method, got: await readJsonBody(req) }),
    async (url, stats) => {
      for (let call = 0; call < 3; call++) {
        assert.deepEqual(
          await callJson(`${url}/x`, 'the test', { method: 'POST', body: { call }, timeoutMs: 5000 }),
          {
            method: 'POST',
            got: { call },
          },
        );
      }
      assert.deepEqual(await callJson(`${url}/x`, 'the test', { timeoutMs: 5000 }), {
        method: 'GET',
        got: {},
      });
      assert.equal(stats.connections, 1);
    },
  );
});

test('callJson: error answers become typed errors; codes it does not know are protocol errors', async () => {
  await withServer(
    (req, res) => {
      if (req.url === '/known') sendJson(res, 409, { code: 'SWARM_UNKNOWN_MODEL', message: 'no such model' });
      else if (req.url === '/unknown') sendJson(res, 500, { code: 'SOMETHING_ELSE', message: 'x' });
      else res.end('not json');
    },
    async (url) => {
      await assert.rejects(callJson(`${url}/known`, 'the test', { timeoutMs: 5000 }), (error: unknown) =>
        isWeightcastError(error, 'SWARM_UNKNOWN_MODEL'),
      );
      await assert.rejects(callJson(`${url}/unknown`, 'the test', { timeoutMs: 5000 }), (error: unknown) =>
        isWeightcastError(error, 'SWARM_PROTOCOL'),
      );
      await assert.rejects(callJson(`${url}/text`, 'the test', { timeoutMs: 5000 }), (error: unknown) =>
        isWeightcastError(error, 'SWARM_PROTOCOL'),
      );
    },
  );
});

test('callJson: no answer, a body cut off, a timeout and the caller aborting are told apart', async () => {
  let unusedUrl = '';
  await withServer(
    (req, res) => {
      if (req.url === '/cut') {
        res.writeHead(200, { 'content-length': '100' });
        res.write('{"partial":');
        setTimeout(() => res.destroy(), 20);
      }
      // Anything else is never answered.
    },
    async (url) => {
      unusedUrl = url;
      await assert.rejects(callJson(`${url}/cut`, 'the test', { timeoutMs: 5000 }), (error: unknown) =>
        isWeightcastError(error, 'SCHEDULER_UNREACHABLE'),
      );
      await assert.rejects(callJson(`${url}/silent`, 'the test', { timeoutMs: 50 }), (error: unknown) =>
        isWeightcastError(error, 'SCHEDULER_UNREACHABLE'),
      );
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 20);
      await assert.rejects(
        callJson(`${url}/silent`, 'the test', { timeoutMs: 5000, signal: controller.signal }),
        (error: unknown) => isWeightcastError(error, 'ABORTED'),
      );
    },
  );
  // The server is gone: nothing listens there now.
  await assert.rejects(callJson(`${unusedUrl}/x`, 'the test', { timeoutMs: 5000 }), (error: unknown) =>
    isWeightcastError(error, 'SCHEDULER_UNREACHABLE'),
  );
});
