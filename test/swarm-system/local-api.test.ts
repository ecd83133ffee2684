/**
 * The agent's local API is for processes of this machine only: a web page cannot reach it through a
 * browser (foreign Host or Origin, a body that is not JSON), malformed URLs are the client's error,
 * and a request that arrives too slowly is cut off (issue 16, findings 3, 5 and 7).
 */

import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { request } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { manifestDigest, encodeManifest } from '../../src/manifest/manifest.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { tempDir } from '../helpers/fixtures.js';
import { fakeManifest } from '../helpers/swarm.js';

let work: { path: string; cleanup: () => Promise<void> };
let scheduler: SchedulerServer;
let agent: Agent;

before(async () => {
  work = await tempDir('local-api');
  scheduler = await startScheduler();
  agent = await Agent.start({
    schedulerUrl: scheduler.url,
    cacheDir: join(work.path, 'cache'),
    requestTimeoutMs: 300,
  });
});

after(async () => {
  await agent.close();
  await scheduler.close();
  await work.cleanup();
});

/** A raw request, so the test chooses every header (fetch would not let it set Host). */
function send(
  path: string,
  method: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; body: string }> {
  const url = new URL(agent.url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, path, method, headers, timeout: 5000 },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const joinBody = JSON.stringify({
  source: 'http://127.0.0.1:9/',
  manifest: encodeManifest(fakeManifest(2)).toString('utf8'),
});

describe('the local API against web pages', () => {
  it('refuses a foreign Host, a foreign Origin and a body that is not JSON, and takes the real thing', async () => {
    const host = new URL(agent.url).host;
    const json = { 'content-type': 'application/json' };
    for (const [headers, reason] of [
      [{ ...json, host: 'evil.example:7100' }, /Host: evil\.example/],
      [{ ...json, host, origin: 'http://evil.example' }, /Origin: http:\/\/evil\.example/],
      [{ ...json, host, origin: 'null' }, /Origin: null/],
      [{ 'content-type': 'text/plain', host }, /JSON bodies only/],
    ] as const) {
      const answer = await send('/v1/local/models', 'POST', headers, joinBody);
      assert.equal(answer.status, 403, answer.body);
      const parsed = JSON.parse(answer.body) as { code: string; message: string };
      assert.equal(parsed.code, 'FORBIDDEN');
      assert.match(parsed.message, reason);
    }
    assert.throws(() => agent.status(manifestDigest(fakeManifest(2)).slice(7)), {
      code: 'SWARM_UNKNOWN_MODEL',
    });
    const accepted = await send(
      '/v1/local/models',
      'POST',
      { ...json, host, origin: `http://${host}` },
      joinBody,
    );
    assert.equal(accepted.status, 200, accepted.body);
  });

  it('answers malformed percent-encoding with 400, not a server error', async () => {
    const hex = manifestDigest(fakeManifest(2)).slice(7);
    const answer = await send(`/v1/models/${hex}/files/%zz`, 'GET', { host: new URL(agent.url).host });
    assert.equal(answer.status, 400, answer.body);
    assert.equal((JSON.parse(answer.body) as { code: string }).code, 'USAGE');
  });

  it('cuts off a request whose body does not arrive in time', async () => {
    const url = new URL(agent.url);
    const socket = connect(Number(url.port), url.hostname);
    const closed = new Promise<number>((resolve) => {
      const started = performance.now();
      socket.on('close', () => resolve(performance.now() - started));
      socket.on('error', () => undefined);
      // Read what the server says (a 408), or the socket never sees its end.
      socket.resume();
    });
    socket.write(
      `POST /v1/local/models HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"so`,
    );
    const ms = await Promise.race([
      closed,
      new Promise<number>((resolve) => setTimeout(() => resolve(-1), 5000)),
    ]);
    socket.destroy();
    assert.ok(ms >= 0, 'the slow request was still open after 5 s');
  });
});
