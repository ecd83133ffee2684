/**
 * Every HTTP server keeps the same limits (issue 16, finding 5): slow heads and bodies are cut off,
 * idle sockets closed, request bodies buffered only under a per-process budget (413 or 503
 * SERVER_BUSY beyond it, never memory growth), and one client address cannot hold all connections.
 * Real servers and sockets on loopback; attackers connect from 127.0.0.2, honest clients from
 * 127.0.0.1; the caps are small so each test takes about a second.
 */

import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { BodyBudget } from '../../src/util/server-limits.js';
import { deterministicBytes, tempDir } from '../helpers/fixtures.js';

const ATTACKER = '127.0.0.2';
const WAIT_MS_MAX = 5000;

let work: { path: string; cleanup: () => Promise<void> };
let scheduler: SchedulerServer;
let agent: Agent;
let files: FileServer;
const schedulerBudget = new BodyBudget(1024 * 1024);
const agentBudget = new BodyBudget(1024 * 1024);
const BIG_FILE_BYTES = 32 * 1024 * 1024;

before(async () => {
  work = await tempDir('server-limits');
  scheduler = await startScheduler({
    limits: { connectionsPerAddressMax: 8, requestTimeoutMs: 600, bodyBudget: schedulerBudget },
  });
  agent = await Agent.start({
    schedulerUrl: scheduler.url,
    cacheDir: join(work.path, 'cache'),
    limits: { connectionsPerAddressMax: 8, headersTimeoutMs: 400, bodyBudget: agentBudget },
  });
  await writeFile(join(work.path, 'big.bin'), deterministicBytes('big', BIG_FILE_BYTES));
  files = await startFileServer({
    root: work.path,
    limits: { connectionsPerAddressMax: 8, keepAliveTimeoutMs: 300, socketIdleMs: 400 },
  });
});

after(async () => {
  await agent.close();
  await scheduler.close();
  await files.close();
  await work.cleanup();
});

interface Probe {
  socket: Socket;
  /** Everything the server sent. */
  received: () => string;
  closed: Promise<void>;
}

/** A raw connection from `localAddress` that writes `data` and records what comes back. */
async function open(base: string, data: string, localAddress = ATTACKER): Promise<Probe> {
  const url = new URL(base);
  const socket = connect({ host: url.hostname, port: Number(url.port), localAddress });
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => (text += chunk));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.write(data);
  return { socket, received: () => text, closed };
}

/** Resolves true if the promise settles within the time, false otherwise. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

function get(base: string, path: string): Promise<{ status: number; body: string }> {
  const url = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = request(url, { timeout: WAIT_MS_MAX, localAddress: '127.0.0.1' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.end();
  });
}

/** 30 half-sent heads from one address: 8 stay open, the rest are told 503 and closed. */
async function floodFromOneAddress(base: string): Promise<void> {
  const probes: Probe[] = [];
  try {
    for (let i = 0; i < 30; i++) probes.push(await open(base, 'GET /healthz HTTP/1.1\r\nHost: x\r\n'));
    const refused = probes.slice(8);
    for (const probe of refused) {
      assert.ok(await within(probe.closed, WAIT_MS_MAX), 'a connection over the cap stayed open');
      assert.match(probe.received(), /^HTTP\/1\.1 503 /);
      assert.match(probe.received(), /"code":"SERVER_BUSY"/);
    }
    assert.equal(probes.slice(0, 8).filter((probe) => probe.socket.destroyed).length, 0);
    // Another address is served while the first holds its eight.
    const health = await get(base, '/healthz');
    assert.equal(health.status, 200);
  } finally {
    for (const probe of probes) probe.socket.destroy();
    await Promise.all(probes.map((probe) => within(probe.closed, WAIT_MS_MAX)));
  }
  // The count goes down as the server sees the connections close: the address is served again.
  let answer = '';
  for (let attempt = 0; attempt < 100 && !answer.startsWith('HTTP/1.1 200 '); attempt++) {
    if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    const again = await open(base, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.ok(await within(again.closed, WAIT_MS_MAX));
    answer = again.received();
  }
  assert.match(answer, /^HTTP\/1\.1 200 /);
}

describe('connections per client address', () => {
  it('the scheduler keeps /healthz for others while one address holds its cap', async () => {
    await floodFromOneAddress(scheduler.url);
  });
  it('the agent does too', async () => {
    await floodFromOneAddress(agent.url);
  });
  it('the origin file server does too', async () => {
    const url = new URL(files.url);
    const probes: Probe[] = [];
    try {
      for (let i = 0; i < 12; i++) probes.push(await open(files.url, 'GET /big.bin HTTP/1.1\r\nHost: x\r\n'));
      for (const probe of probes.slice(8)) {
        assert.ok(await within(probe.closed, WAIT_MS_MAX));
        assert.match(probe.received(), /"code":"SERVER_BUSY"/);
      }
      const head = await new Promise<number>((resolve, reject) => {
        const req = request(
          { host: url.hostname, port: url.port, path: '/big.bin', method: 'HEAD', localAddress: '127.0.0.1' },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        req.end();
      });
      assert.equal(head, 200);
    } finally {
      for (const probe of probes) probe.socket.destroy();
    }
  });
});

describe('timeouts', () => {
  it('a head that never ends is cut off (agent, headersTimeoutMs 400)', async () => {
    const probe = await open(agent.url, 'GET /healthz HTTP/1.1\r\nHost: x\r\n', '127.0.0.1');
    assert.ok(await within(probe.closed, WAIT_MS_MAX), 'the half-sent head was still open');
  });

  it('a body that trickles is cut off with 408 (scheduler, requestTimeoutMs 600)', async () => {
    const probe = await open(
      scheduler.url,
      'POST /v1/swarms/' +
        'a'.repeat(64) +
        '/hosts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        'Content-Length: 1000\r\n\r\n{',
      '127.0.0.1',
    );
    assert.ok(await within(probe.closed, WAIT_MS_MAX), 'the slow body was still open');
    assert.match(probe.received(), /^HTTP\/1\.1 408 /);
    assert.equal(schedulerBudget.inUseBytes, 0);
  });

  it('an idle kept-alive connection is closed (file server, keepAliveTimeoutMs 300)', async () => {
    const probe = await open(files.url, 'HEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\n', '127.0.0.1');
    assert.ok(await within(probe.closed, WAIT_MS_MAX), 'the idle connection was still open');
    assert.match(probe.received(), /^HTTP\/1\.1 200 /);
  });

  it('a reader that stops reading is dropped (file server, socketIdleMs 400)', async () => {
    const probe = await open(files.url, 'GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n', '127.0.0.1');
    probe.socket.pause();
    await new Promise((resolve) => setTimeout(resolve, 1500));
    probe.socket.resume();
    assert.ok(await within(probe.closed, WAIT_MS_MAX), 'the stalled response was still open');
    assert.ok(probe.received().length < BIG_FILE_BYTES, 'the whole file arrived: the socket was not dropped');
  });
});

describe('the body budget', () => {
  const register = 'POST /v1/swarms/' + 'b'.repeat(64) + '/hosts HTTP/1.1\r\nHost: x\r\n';
  const budget = new BodyBudget(1024 * 1024);
  // Its own scheduler, with the default request timeout, so the bodies held open stay open.
  let patient: SchedulerServer;
  before(async () => {
    patient = await startScheduler({ limits: { bodyBudget: budget } });
  });
  after(async () => {
    await patient.close();
  });

  it('bodies that do not fit now get 503 SERVER_BUSY; the budget is never exceeded', async () => {
    const bodyBytes = 400 * 1024;
    const probes: Probe[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        probes.push(
          await open(
            patient.url,
            `${register}Content-Type: application/json\r\nContent-Length: ${bodyBytes}\r\n\r\n{"a":"`,
            `127.0.0.${10 + i}`,
          ),
        );
      }
      // Two bodies of 400 KiB fit a 1 MiB budget; the other four are refused without being read.
      const refused = await Promise.all(probes.map((probe) => within(probe.closed, 1000)));
      assert.deepEqual(refused, [false, false, true, true, true, true]);
      for (const probe of probes.slice(2)) {
        assert.match(probe.received(), /^HTTP\/1\.1 503 /);
        assert.match(probe.received(), /"code":"SERVER_BUSY"/);
        assert.match(probe.received(), /retry-after: 1/i);
      }
      assert.equal(budget.inUseBytes, 2 * bodyBytes);
    } finally {
      for (const probe of probes) probe.socket.destroy();
      await Promise.all(probes.map((probe) => within(probe.closed, WAIT_MS_MAX)));
    }
    assert.ok(budget.peakBytes <= budget.bytesMax);
    await waitFor(() => budget.inUseBytes === 0);
  });

  it('a body larger than the whole budget is 413 LIMIT_EXCEEDED', async () => {
    const probe = await open(
      patient.url,
      `${register}Content-Type: application/json\r\nContent-Length: ${2 * 1024 * 1024}\r\n\r\n{`,
      '127.0.0.1',
    );
    assert.ok(await within(probe.closed, WAIT_MS_MAX));
    assert.match(probe.received(), /^HTTP\/1\.1 413 /);
    assert.match(probe.received(), /"code":"LIMIT_EXCEEDED"/);
  });

  it('a chunked body is counted as it arrives and refused once it outgrows the budget', async () => {
    const probe = await open(
      agent.url,
      'POST /v1/local/models HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
        'Transfer-Encoding: chunked\r\n\r\n',
      '127.0.0.1',
    );
    const chunk = 'x'.repeat(256 * 1024);
    for (let i = 0; i < 6 && !probe.socket.destroyed; i++) {
      probe.socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.ok(await within(probe.closed, WAIT_MS_MAX));
    assert.match(probe.received(), /"code":"SERVER_BUSY"/);
    assert.ok(agentBudget.peakBytes <= agentBudget.bytesMax);
    await waitFor(() => agentBudget.inUseBytes === 0);
  });
});

async function waitFor(condition: () => boolean): Promise<void> {
  for (let waited = 0; !condition(); waited += 20) {
    assert.ok(waited < WAIT_MS_MAX, 'condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
