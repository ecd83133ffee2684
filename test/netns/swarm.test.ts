/**
 * A small swarm run on the netns testbed (tc caps on every link), the user's flow: the real scheduler
 * on the origin's host, and on every host a cold agent and `pull --agent`, deliver verified copies
 * with the origin sending each byte about once. Needs root and `ip netns`; skipped (with the reason)
 * anywhere else. Checks behaviour, not timings.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { NGINX_INSTALL_HINT } from '../../bench/netns/commands.js';
import { missingTools } from '../../bench/netns/leg-runtime.js';
import { netnsProblem } from '../../bench/netns/testbed.js';

const FANOUT = join(resolve(fileURLToPath(import.meta.url), '../../..'), 'bench', 'fanout.js');

test('netns: a 3-host swarm behind tc caps delivers verified copies, origin sending about 1 x S', async (t) => {
  const problem = await netnsProblem();
  if (problem !== undefined) {
    t.skip(`needs root and ip netns: ${problem}`);
    return;
  }
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [
      FANOUT,
      '--hosts',
      '3',
      '--size-mb',
      '8',
      '--mbps',
      '100',
      '--piece-mb',
      '1',
      '--legs',
      'swarm',
      '--json',
    ],
    { timeout: 150_000, maxBuffer: 16 * 1024 * 1024 },
  );
  const report = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as {
    mode?: string;
    originServer?: string;
    legs?: Array<{
      leg: string;
      hosts: number;
      hostsFinished: number;
      hostsVerified: number;
      originRatio: number;
    }>;
  };
  assert.equal(report.mode, 'netns', stdout);
  // The origin is nginx where it is installed (the default, --origin-server auto).
  assert.equal(report.originServer, missingTools(['nginx']).length === 0 ? 'nginx' : 'weightcast', stdout);
  const swarm = report.legs?.find((leg) => leg.leg === 'swarm');
  assert.ok(swarm !== undefined, stdout);
  assert.equal(swarm.hostsFinished, 3);
  assert.equal(swarm.hostsVerified, 3);
  // A naive pull would send 3 x S; the origin's TX counter includes headers and the scheduler's messages.
  assert.ok(swarm.originRatio < 1.5, `origin sent ${swarm.originRatio} x S`);
});

for (const server of ['nginx', 'weightcast'] as const) {
  test(`netns: the naive leg pulls verified copies from a ${server} origin`, async (t) => {
    const problem = await netnsProblem();
    if (problem !== undefined) {
      t.skip(`needs root and ip netns: ${problem}`);
      return;
    }
    if (server === 'nginx' && missingTools(['nginx']).length > 0) {
      t.skip(`nginx is not installed (${NGINX_INSTALL_HINT})`);
      return;
    }
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        FANOUT,
        '--hosts',
        '2',
        '--size-mb',
        '4',
        '--mbps',
        '200',
        '--legs',
        'naive',
        '--origin-server',
        server,
        '--json',
      ],
      { timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
    );
    const report = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as {
      originServer?: string;
      legs?: Array<{ leg: string; hostsVerified: number; originRatio: number }>;
    };
    assert.equal(report.originServer, server, stdout);
    const naive = report.legs?.find((leg) => leg.leg === 'naive');
    assert.equal(naive?.hostsVerified, 2, stdout);
    // Every host reads the whole model from the origin.
    assert.ok((naive?.originRatio ?? 0) > 1.9, stdout);
  });
}
