/**
 * The congestion control of what an agent sends its peers (src/util/tcp-congestion.ts): the choice
 * (pure), the setter on real loopback sockets (native helper), the agent's own port read back with
 * `ss`, and the command line's answer to a name the kernel lacks.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { readdir } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { CLI } from '../../scripts/cluster.js';
import { isWeightcastError } from '../../src/errors.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import {
  CongestionSetter,
  chooseCongestion,
  congestionSettable,
  kernelCongestion,
  socketCongestion,
} from '../../src/util/tcp-congestion.js';
import { tempDir } from '../helpers/fixtures.js';

const run = promisify(execFile);
const BBR_HOST = { systemDefault: 'bbr', available: ['reno', 'bbr', 'cubic'] };
const CUBIC_HOST = { systemDefault: 'cubic', available: ['reno', 'cubic'] };

test('auto: cubic only where the system default is bbr; system: never; a name: as given', () => {
  assert.equal(chooseCongestion('auto', BBR_HOST), 'cubic');
  assert.equal(chooseCongestion('auto', CUBIC_HOST), undefined);
  assert.equal(
    chooseCongestion('auto', { systemDefault: 'dctcp', available: ['dctcp', 'cubic'] }),
    undefined,
  );
  // bbr with no cubic to turn to: left alone.
  assert.equal(chooseCongestion('auto', { systemDefault: 'bbr', available: ['bbr', 'reno'] }), undefined);
  assert.equal(chooseCongestion('auto', { available: [] }), undefined);
  assert.equal(chooseCongestion('system', BBR_HOST), undefined);
  assert.equal(chooseCongestion('reno', BBR_HOST), 'reno');
  assert.equal(chooseCongestion('bbr', BBR_HOST), 'bbr');
});

test('a name the kernel does not offer is bad usage that lists what it offers', () => {
  for (const [setting, kernel, listed] of [
    ['vegas', BBR_HOST, 'reno, bbr, cubic'],
    ['cubic', { available: [] }, 'none that could be read'],
    ['', CUBIC_HOST, 'reno, cubic'],
  ] as const) {
    assert.throws(
      () => chooseCongestion(setting, kernel),
      (error: unknown) =>
        isWeightcastError(error) &&
        error.code === 'USAGE' &&
        error.message.includes(`(${listed}), got ${setting}`),
    );
  }
});

test('the kernel is read from its two files; a file that cannot be read counts as empty', () => {
  const files: Record<string, string> = {
    '/proc/sys/net/ipv4/tcp_congestion_control': 'bbr\n',
    '/proc/sys/net/ipv4/tcp_available_congestion_control': 'reno bbr  cubic\n',
  };
  const read = (path: string): string => {
    const text = files[path];
    if (text === undefined) throw new Error(`ENOENT: ${path}`);
    return text;
  };
  assert.deepEqual(kernelCongestion(read), BBR_HOST);
  delete files['/proc/sys/net/ipv4/tcp_congestion_control'];
  assert.deepEqual(kernelCongestion(read), { available: ['reno', 'bbr', 'cubic'] });
  assert.deepEqual(
    kernelCongestion(() => {
      throw new Error('not Linux');
    }),
    { available: [] },
  );
  if (process.platform === 'linux') {
    const here = kernelCongestion();
    assert.ok(here.systemDefault !== undefined && here.available.includes(here.systemDefault));
  }
});

test('the setter sets an accepted socket; a refusal is said once and ends the trying', async (t) => {
  if (!congestionSettable()) return t.skip('the native helper is not built on this machine');
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const failures: string[] = [];
  const reno = new CongestionSetter('reno', (reason) => failures.push(reason));
  const missing = new CongestionSetter('no-such-cc', (reason) => failures.push(reason));
  const accepted: Socket[] = [];
  server.on('connection', (socket: Socket) => accepted.push(socket));
  const clients = [0, 1, 2].map(() => connect((server.address() as AddressInfo).port, '127.0.0.1'));
  try {
    await Promise.all(clients.map((client) => once(client, 'connect')));
    for (let i = 0; accepted.length < 3 && i < 100; i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    const [first, second, third] = accepted;
    assert.ok(first !== undefined && second !== undefined && third !== undefined);
    const before = socketCongestion(first);
    assert.equal(typeof before, 'string');
    reno.apply(first);
    assert.equal(socketCongestion(first), 'reno');
    assert.deepEqual(failures, []);
    missing.apply(second);
    missing.apply(third);
    assert.deepEqual(failures, ['the kernel refused it (ENOENT)']);
    // The refused sockets kept what they had.
    assert.equal(socketCongestion(second), before);
    assert.equal(socketCongestion(third), before);
  } finally {
    for (const client of clients) client.destroy();
    for (const socket of accepted) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

/** The congestion control `ss` reports for the connections accepted on `port` of 127.0.0.1. */
async function acceptedCongestion(port: number): Promise<string[]> {
  const { stdout } = await run('ss', ['-tni', 'state', 'established', `( sport = :${port} )`]);
  // Each socket's info line starts with its options (ts, sack, ecn...), then the algorithm's name,
  // then name:value fields.
  const flags = new Set(['ts', 'sack', 'ecn', 'ecnseen', 'fastopen', 'cong_alg']);
  return stdout
    .split('\n')
    .filter((line) => /^\s/.test(line) && line.includes('rto:'))
    .map((line) => {
      const words = line.trim().split(/\s+/);
      const bare = words.slice(
        0,
        words.findIndex((word) => word.includes(':')),
      );
      return bare.filter((word) => !flags.has(word)).at(-1) ?? '';
    });
}

test("an agent's peers get the named algorithm on its port; system leaves the kernel's", async (t) => {
  if (!congestionSettable()) return t.skip('the native helper is not built on this machine');
  try {
    await run('ss', ['-V']);
  } catch {
    return t.skip('ss (iproute2) is not installed: the agent side is not read back');
  }
  const work = await tempDir('tcp-congestion');
  const systemDefault = kernelCongestion().systemDefault;
  const other = systemDefault === 'reno' ? 'cubic' : 'reno';
  try {
    for (const [setting, expected] of [
      [other, other],
      ['system', systemDefault],
    ] as const) {
      const agent = await Agent.start({
        schedulerUrl: 'http://127.0.0.1:9',
        cacheDir: work.path,
        resume: false,
        tcpCongestion: setting,
      });
      const socket = connect(Number(new URL(agent.url).port), '127.0.0.1');
      try {
        await once(socket, 'connect');
        let seen: string[] = [];
        for (let i = 0; i < 50 && seen.length === 0; i++) {
          seen = await acceptedCongestion(Number(new URL(agent.url).port));
          if (seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
        }
        assert.ok(seen.length > 0, `ss showed no connection on the agent's port (setting ${setting})`);
        assert.deepEqual(new Set(seen), new Set([expected]), `setting ${setting}`);
      } finally {
        socket.destroy();
        await agent.close();
      }
    }
  } finally {
    await work.cleanup();
  }
});

test('weightcast agent --tcp-congestion with a name the kernel lacks: exit 2, what it offers, cache untouched', async () => {
  const work = await tempDir('tcp-congestion-cli');
  try {
    const failed = await run(process.execPath, [
      CLI,
      'agent',
      '--scheduler',
      'http://127.0.0.1:9',
      '--cache',
      work.path,
      '--port',
      '0',
      '--tcp-congestion',
      'no-such-cc',
    ]).then(
      () => assert.fail('the agent started'),
      (error: { code: number; stderr: string }) => error,
    );
    assert.equal(failed.code, 2);
    assert.match(
      failed.stderr,
      /USAGE: --tcp-congestion must be auto, system or an algorithm this kernel offers \(.*\), got no-such-cc/,
    );
    assert.deepEqual(await readdir(work.path), []);
  } finally {
    await work.cleanup();
  }
});
