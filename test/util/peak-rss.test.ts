/**
 * The peak RSS that `pull`, `load` and `preshard` report is the process's own: VmHWM, not maxRSS,
 * which a child inherits from the parent it was forked from (Linux keeps it across execve).
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { writeManifest } from '../../src/manifest/manifest.js';
import { peakRssBytes, vmHighWaterBytes } from '../../src/util/peak-rss.js';
import { pullFixture } from '../helpers/fixtures.js';

const BIN = fileURLToPath(new URL('../../../bin/weightcast.js', import.meta.url));
const MiB = 1024 * 1024;

test('VmHWM is read from a status text, in bytes; a text without it gives undefined', () => {
  const status = 'Name:\tnode\nVmPeak:\t  900000 kB\nVmHWM:\t   81234 kB\nVmRSS:\t   70000 kB\n';
  assert.equal(vmHighWaterBytes(status), 81234 * 1024);
  assert.equal(vmHighWaterBytes('Name:\tnode\nVmRSS:\t 1 kB\n'), undefined);
});

test('without a status to read, the peak is maxRSS', () => {
  const fallback = peakRssBytes(() => {
    throw new Error('no /proc here');
  });
  assert.ok(fallback > 0);
  assert.ok(Math.abs(fallback - process.resourceUsage().maxRSS * 1024) < 64 * MiB);
});

test(
  "a pull started by a process with a large resident set reports its own peak, not its parent's",
  { skip: process.platform !== 'linux' && 'VmHWM is Linux only' },
  async () => {
    const fixture = await pullFixture('peak-rss', 64 * 1024, 1);
    // 320 MiB resident in this process (every page written) while the pull is forked from it.
    const ballast = Buffer.alloc(320 * MiB, 1);
    try {
      const manifestPath = join(fixture.dest, '..', 'manifest.json');
      await writeManifest(manifestPath, fixture.manifest);
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [BIN, 'pull', fixture.root, '--to', fixture.dest, '--manifest', manifestPath, '--json', '--no-agent'],
        { maxBuffer: 16 * MiB },
      );
      const done = stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { event?: string; peakRssBytes?: number })
        .find((event) => event.event === 'done');
      assert.ok(done?.peakRssBytes !== undefined, stdout);
      // The parent's maxRSS, which the child would have reported before, is above the ballast.
      assert.ok(process.resourceUsage().maxRSS * 1024 > 320 * MiB);
      assert.ok(
        done.peakRssBytes < 200 * MiB,
        `the pull reported ${(done.peakRssBytes / MiB).toFixed(0)} MiB: its parent's size, not its own`,
      );
      assert.ok(ballast[ballast.length - 1] === 1);
    } finally {
      await fixture.cleanup();
    }
  },
);
