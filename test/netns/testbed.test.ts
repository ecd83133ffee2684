/**
 * The netns testbed for real: namespaces, bridge, veth pairs and tc caps, an HTTP request from a host
 * namespace to a server in the origin namespace, and a cleanup that leaves nothing behind. Needs root
 * and `ip netns`; skipped (with the reason) anywhere else.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { firstMatch, waitForExit } from '../../bench/netns/children.js';
import { interfaceNames } from '../../bench/netns/plan.js';
import { createTestbed, LoopbackHosts, netnsProblem } from '../../bench/netns/testbed.js';

const STEP_TIMEOUT_MS = 5000;
const PORT = 8080;

test('a 2-host testbed connects its hosts and its control machine to the origin and close() removes everything', async (t) => {
  const problem = await netnsProblem();
  if (problem !== undefined) {
    t.skip(`needs root and ip netns: ${problem}`);
    return;
  }
  const testbed = await createTestbed({ hosts: 2, hostMbps: 100, originMbps: 100, mtu: 9000 });
  const { plan } = testbed;
  let server;
  try {
    assert.equal(testbed.created.namespaces.length, 4, 'origin, 2 hosts and the control machine');
    for (const name of [plan.bridge, ...testbed.hosts.map((h) => h.bridgePort)]) {
      assert.ok(existsSync(`/sys/class/net/${name}`), name);
    }
    const qdiscs = execFileSync('tc', ['-n', plan.origin.ns, 'qdisc', 'show', 'dev', 'eth0'], {
      encoding: 'utf8',
    });
    assert.match(qdiscs, /tbf .*rate 100Mbit/);
    for (const host of testbed.hosts) {
      assert.equal(readFileSync(`/sys/class/net/${host.bridgePort}/mtu`, 'utf8').trim(), '9000');
      const link = execFileSync('ip', ['-n', host.ns, 'link', 'show', 'dev', 'eth0'], { encoding: 'utf8' });
      assert.match(link, / mtu 9000 /, `${host.label} eth0`);
    }

    const serve =
      `require('node:http').createServer((q, s) => s.end('hello from ' + q.socket.localAddress))` +
      `.listen(${PORT}, '${plan.origin.address}', () => console.log('ready'))`;
    server = testbed.spawnIn(plan.origin.ns, [process.execPath, '-e', serve]);
    await firstMatch(server, /^ready$/, STEP_TIMEOUT_MS, 'server');

    const txBefore = await testbed.txBytes(plan.origin.ns);
    for (const host of [...testbed.hosts, testbed.control]) {
      const get =
        `fetch('http://${plan.origin.address}:${PORT}/', { signal: AbortSignal.timeout(${STEP_TIMEOUT_MS}) })` +
        `.then((r) => r.text()).then((text) => console.log('got ' + text))`;
      const client = testbed.spawnIn(host.ns, [process.execPath, '-e', get]);
      const line = firstMatch(client, /^got (.*)$/, STEP_TIMEOUT_MS, `client in ${host.label}`);
      assert.equal((await line)[1], `hello from ${plan.origin.address}`);
      assert.deepEqual(await waitForExit(client, STEP_TIMEOUT_MS), { code: 0, signal: null });
    }
    assert.ok((await testbed.txBytes(plan.origin.ns)) > txBefore, 'the origin sent bytes on eth0');
  } finally {
    await testbed.close();
  }

  assert.ok(
    server !== undefined && (server.exitCode !== null || server.signalCode !== null),
    'server stopped',
  );
  const namespaces = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  for (const ns of [plan.origin, ...plan.hosts].map((e) => e.ns)) {
    assert.doesNotMatch(namespaces, new RegExp(`^${ns}\\b`, 'm'), `namespace ${ns} left behind`);
  }
  for (const name of interfaceNames(plan))
    assert.ok(!existsSync(`/sys/class/net/${name}`), `link ${name} left behind`);
  assert.deepEqual(testbed.created, { namespaces: [], links: [] });
});

test('loopback hosts count what the origin writes and stop their processes on close', async () => {
  const hosts = new LoopbackHosts(2, 100, 100);
  assert.deepEqual(
    hosts.hosts.map((h) => [h.label, h.address]),
    [
      ['host1', '127.0.0.1'],
      ['host2', '127.0.0.1'],
    ],
  );
  let child;
  try {
    const script = "process.stdout.write('x'.repeat(100000) + '\\nready\\n'); setInterval(() => {}, 1000)";
    child = hosts.spawnIn(hosts.origin.ns, [process.execPath, '-e', script]);
    await firstMatch(child, /^ready$/, STEP_TIMEOUT_MS, 'writer');
    assert.ok((await hosts.txBytes(hosts.origin.ns)) >= 100_000);
    assert.equal(await hosts.txBytes('host1'), 0);
    assert.deepEqual(hosts.livePids(), [child.pid]);
  } finally {
    await hosts.close();
  }
  assert.ok(child.exitCode !== null || child.signalCode !== null, 'the writer was stopped');
  assert.deepEqual(hosts.livePids(), []);
});
