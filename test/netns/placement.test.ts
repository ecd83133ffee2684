/**
 * A tiny `bench:placement` part (a) on the netns testbed: 3 seed nodes, a 16 MiB model put while only
 * 2 of them were up, then `distribute --mode round-robin --apply`. Checks behaviour, not timings:
 * both pulls verify and after the re-layout every node served its share. Needs root and `ip netns`;
 * skipped (with the reason) anywhere else.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaultNetnsOptions, everyNodeServed, runPlacementNetns } from '../../bench/placement-netns.js';
import { netnsProblem } from '../../bench/netns/testbed.js';

test(
  'netns: after a round-robin apply every one of 3 seed nodes serves a verified pull',
  { timeout: 240_000 },
  async (t) => {
    const problem = await netnsProblem();
    if (problem !== undefined) {
      t.skip(`needs root and ip netns: ${problem}`);
      return;
    }
    const lines: string[] = [];
    const result = await runPlacementNetns({
      ...defaultNetnsOptions(3),
      nodeMbps: 100,
      clientMbps: 600,
      sizeMb: 16,
      log: (line) => lines.push(line),
    });
    const context = lines.join('\n');
    assert.equal(result.before.verified, true, `before: ${result.before.problem ?? ''}\n${context}`);
    assert.equal(result.after.verified, true, `after: ${result.after.problem ?? ''}\n${context}`);
    assert.equal(result.distribute.problem, undefined, context);
    assert.ok(result.distribute.moves > 0, 'the 2-node layout needed moves');
    assert.equal(result.distribute.committed, result.distribute.moves);
    // Before, the third node held nothing; after, every node sent at least a quarter of S / 3.
    assert.ok(result.before.bytesByNode[2]! < result.totalBytes / 100, result.before.bytesByNode.join(', '));
    assert.equal(result.after.bytesByNode.length, 3);
    assert.ok(everyNodeServed(result.after, result.totalBytes), result.after.bytesByNode.join(', '));
  },
);
