/**
 * The BitTorrent, chain, node-chain, store-chain and store-ring legs of bench:fanout on a small netns testbed: the command
 * lines built in `bench/netns/commands.ts` really move a verified copy to every host (aria2c,
 * opentracker and mktorrent; socat, tee and tar; bench/node-relay.ts). Needs root, `ip netns` and Debian's tools; skipped (with the
 * reason) anywhere else. Checks behaviour, not timings.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { BASELINE_INSTALL_HINT, BITTORRENT_TOOLS, CHAIN_TOOLS } from '../../bench/netns/commands.js';
import { missingTools } from '../../bench/netns/leg-runtime.js';
import { netnsProblem } from '../../bench/netns/testbed.js';

const FANOUT = join(resolve(fileURLToPath(import.meta.url), '../../..'), 'bench', 'fanout.js');

test('netns: the BitTorrent, chain, node-chain, store-chain and store-ring legs deliver a verified copy to every host', async (t) => {
  const problem = await netnsProblem();
  if (problem !== undefined) {
    t.skip(`needs root and ip netns: ${problem}`);
    return;
  }
  const missing = missingTools([...BITTORRENT_TOOLS, ...CHAIN_TOOLS]);
  if (missing.length > 0) {
    t.skip(`${missing.join(', ')} not installed (${BASELINE_INSTALL_HINT})`);
    return;
  }
  const legs = 'bittorrent,chain,node-chain,store-chain,store-ring';
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [FANOUT, '--hosts', '2', '--size-mb', '4', '--mbps', '100', '--legs', legs, '--json'],
    { timeout: 150_000, maxBuffer: 16 * 1024 * 1024 },
  );
  const report = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as {
    mode?: string;
    legs?: Array<{ leg: string; hostsFinished: number; hostsVerified: number; originRatio: number }>;
  };
  assert.equal(report.mode, 'netns', stdout);
  for (const name of ['bittorrent', 'chain', 'node-chain', 'store-chain', 'store-ring']) {
    const leg = report.legs?.find((candidate) => candidate.leg === name);
    assert.ok(leg !== undefined, `${name}: ${stdout}`);
    assert.equal(leg.hostsFinished, 2, name);
    assert.equal(leg.hostsVerified, 2, name);
  }
  for (const name of ['chain', 'node-chain', 'store-chain', 'store-ring']) {
    const chain = report.legs?.find((leg) => leg.leg === name);
    assert.ok(chain !== undefined && chain.originRatio < 1.2, `the ${name}'s origin sends the model once`);
  }
});
