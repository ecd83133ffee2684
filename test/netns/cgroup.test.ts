import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import {
  cgroup2Mount,
  cgroupProblem,
  CgroupTree,
  cpuDifference,
  parseCpuStat,
} from '../../bench/netns/cgroup.js';
import { firstMatch, waitForExit } from '../../bench/netns/children.js';
import {
  chainFluidSeconds,
  comparisonLines,
  legLabel,
  roundsComparisonLines,
  speedupText,
  rttSummary,
  startCpuLines,
  summarizeLeg,
  type LegSummary,
} from '../../bench/netns/report.js';

test('the cgroup2 mount is found in hybrid and unified layouts', () => {
  const hybrid = [
    'tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0',
    'cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0',
    'cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0',
  ].join('\n');
  assert.equal(cgroup2Mount(hybrid), '/sys/fs/cgroup/unified');
  assert.equal(cgroup2Mount('cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n'), '/sys/fs/cgroup');
  assert.equal(cgroup2Mount('cgroup2 /mnt/my\\040cg cgroup2 rw 0 0'), '/mnt/my cg');
  assert.equal(cgroup2Mount('cgroup /sys/fs/cgroup/cpu cgroup rw 0 0'), undefined);
});

test("cpu.stat's user and system time in seconds", () => {
  const text = 'usage_usec 353755\nuser_usec 301066\nsystem_usec 52689\nnice_usec 0\n';
  assert.deepEqual(parseCpuStat(text), { userSeconds: 0.301066, systemSeconds: 0.052689 });
  assert.equal(parseCpuStat('usage_usec 1\n'), undefined);
  assert.deepEqual(
    cpuDifference({ userSeconds: 3, systemSeconds: 2 }, { userSeconds: 1, systemSeconds: 0.5 }),
    { userSeconds: 2, systemSeconds: 1.5 },
  );
});

test('CPU per GiB delivered, the chain bound and the comparison with the baselines', () => {
  const setting = { hosts: 8, totalBytes: 2 ** 28, hostMbps: 200, originMbps: 200 };
  const summary = summarizeLeg(
    {
      leg: 'swarm',
      hostSeconds: Array.from({ length: 8 }, () => 20),
      hostsVerified: 8,
      originBytes: 2 ** 28,
      cpu: { userSeconds: 18, systemSeconds: 12 },
      cpuSource: 'cgroup',
      wallSeconds: 20,
    },
    setting,
  );
  assert.equal(summary.userCpuPerGiB, 9);
  assert.equal(summary.kernelCpuPerGiB, 6);
  assert.equal(summary.cpuCores, 1.5);
  assert.equal(summary.cpuSource, 'cgroup');
  assert.equal(chainFluidSeconds(setting, 1), 2 ** 28 / 25e6);

  const leg = (name: string, tLastSeconds: number, cpuPerGiB: number, efficiency: number): LegSummary => ({
    ...summary,
    leg: name,
    tLastSeconds,
    efficiency,
    userCpuPerGiB: cpuPerGiB / 2,
    kernelCpuPerGiB: cpuPerGiB / 2,
  });
  const lines = comparisonLines(
    [
      leg('swarm', 10, 6, 0.9),
      leg('bittorrent', 15, 4, 0.6),
      leg('chain', 9.5, 1, 0.95),
      leg('node-chain', 9.5, 2, 0.95),
    ],
    9,
  );
  assert.deepEqual(lines, [
    "swarm vs bittorrent: T_bt / T_swarm = 1.50 (goal >= 1.4): met; CPU-s/GiB (user + kernel) 1.50 x the BitTorrent leg's (goal <= 1)",
    'swarm vs node-chain: user CPU-s/GiB 3.00 against 1.00 for a minimal Node.js relay at the same pace (3.0 x; the relay is the floor for a Node.js process here: a goal below it is out of reach for any design in Node)',
    'swarm vs chain: T_chain / T_swarm = 0.95 (the chain is the ceiling: efficiency 0.900 against its 0.950)',
    'swarm T_last vs sim: +11.1 %',
  ]);
  assert.deepEqual(comparisonLines([leg('naive', 80, 1, 0.1)], undefined), []);

  // Several rounds: each round's lines, then the medians of the comparison with BitTorrent.
  const inRound = (summary: LegSummary, round: number): LegSummary => ({ ...summary, round });
  const rounds = [
    inRound(leg('swarm', 10, 6, 0.9), 1),
    inRound(leg('bittorrent', 15, 4, 0.6), 1),
    inRound(leg('swarm', 10, 6, 0.9), 2),
    inRound(leg('bittorrent', 12, 6, 0.6), 2),
    inRound(leg('swarm', 10, 5, 0.9), 3),
    inRound(leg('bittorrent', 13, 5, 0.6), 3),
  ];
  assert.deepEqual(roundsComparisonLines(rounds, undefined), [
    "round 1: swarm vs bittorrent: T_bt / T_swarm = 1.50 (goal >= 1.4): met; CPU-s/GiB (user + kernel) 1.50 x the BitTorrent leg's (goal <= 1)",
    "round 2: swarm vs bittorrent: T_bt / T_swarm = 1.20 (goal >= 1.4): NOT met; CPU-s/GiB (user + kernel) 1.00 x the BitTorrent leg's (goal <= 1)",
    "round 3: swarm vs bittorrent: T_bt / T_swarm = 1.30 (goal >= 1.4): NOT met; CPU-s/GiB (user + kernel) 1.00 x the BitTorrent leg's (goal <= 1)",
    "swarm vs bittorrent over 3 rounds: T_bt / T_swarm median 1.30 (1.50, 1.20, 1.30; goal >= 1.4): NOT met; CPU x BitTorrent's median 1.00 (1.50, 1.00, 1.00; goal <= 1)",
  ]);
  // Two rounds: the mean of the two, for the speed-up and for the CPU ratio alike.
  assert.equal(
    roundsComparisonLines(rounds.slice(0, 4), undefined).at(-1),
    "swarm vs bittorrent over 2 rounds: T_bt / T_swarm median 1.35 (1.50, 1.20; goal >= 1.4): NOT met; CPU x BitTorrent's median 1.25 (1.50, 1.00; goal <= 1)",
  );
  // A median that two decimals would round up to the goal is printed with the digits that show it is short.
  const close = [
    inRound(leg('swarm', 10, 6, 0.9), 1),
    inRound(leg('bittorrent', 13.9, 6, 0.6), 1),
    inRound(leg('swarm', 10, 6, 0.9), 2),
    inRound(leg('bittorrent', 14.02, 6, 0.6), 2),
  ];
  assert.match(
    roundsComparisonLines(close, undefined).at(-1) ?? '',
    /median 1\.396 \(1\.39, 1\.40; goal >= 1\.4\): NOT met/,
  );
  assert.equal(speedupText(1.45), '1.45');
  assert.equal(speedupText(1.4), '1.40');
  assert.equal(speedupText(1.397), '1.397');
  assert.equal(speedupText(1.3999), '1.3999');
  // One round (no round numbers): the same lines as comparisonLines.
  assert.deepEqual(
    roundsComparisonLines([leg('swarm', 10, 6, 0.9), leg('bittorrent', 15, 4, 0.6)], 9),
    comparisonLines([leg('swarm', 10, 6, 0.9), leg('bittorrent', 15, 4, 0.6)], 9),
  );
  assert.equal(legLabel(inRound(leg('swarm', 10, 6, 0.9), 2)), 'swarm #2');
  assert.equal(legLabel(leg('swarm', 10, 6, 0.9)), 'swarm');
});

test('a leg cgroup counts the CPU of a process moved into it and is removed with what is left in it', async (t) => {
  const problem = cgroupProblem();
  if (problem !== undefined) {
    t.skip(`needs root and cgroup2: ${problem}`);
    return;
  }
  const tree = await CgroupTree.create(`wctest${process.pid}`);
  let sleeper;
  try {
    const leaf = await tree.leaf('leg');
    assert.ok(existsSync(leaf.procsFile));
    const [role, sameRole] = await Promise.all([leaf.child('role'), leaf.child('role')]);
    assert.equal(role, sameRole, 'one nested cgroup for callers at once');
    const before = await leaf.cpu();
    // Once moved in (a line on stdin), hashes 128 MiB (a fixed amount of CPU, however busy the
    // machine is), says so, then idles until killed.
    const script =
      "process.stdin.once('data', () => { const h = require('node:crypto').createHash('sha256');" +
      ' const b = Buffer.alloc(65536); for (let i = 0; i < 2048; i++) h.update(b);' +
      " console.log('done ' + h.digest('hex').length); setInterval(() => {}, 1000); })";
    const burner = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'ignore'] });
    sleeper = burner;
    await leaf.adoptChildren([burner]);
    assert.deepEqual(await leaf.pids(), [burner.pid]);
    const done = firstMatch(burner, /^done/, 60_000, 'burner');
    burner.stdin.write('go\n');
    await done;
    const used = cpuDifference(await leaf.cpu(), before);
    assert.ok(used.userSeconds > 0.02, `user ${used.userSeconds} s`);
    await tree.removeLeaf('leg');
    assert.ok(!existsSync(leaf.path), 'leaf removed');
    assert.notEqual(await waitForExit(burner, 5000), undefined, 'what was left in it was stopped');
  } finally {
    if (sleeper?.exitCode === null && sleeper.signalCode === null) sleeper.kill('SIGKILL');
    await tree.close();
  }
  assert.ok(!existsSync(tree.root), 'run cgroup removed');
});

test('RTT samples summarize to nearest-rank p50 and p90', () => {
  assert.equal(rttSummary([]), undefined);
  assert.deepEqual(rttSummary([5, 1, 4, 2, 3, 10, 9, 8, 7, 6]), { p50: 5, p90: 9, samples: 10 });
  assert.deepEqual(rttSummary([2]), { p50: 2, p90: 2, samples: 1 });
});

test('the start-up table gives each window its CPU by role and the machine cores busy over it', () => {
  assert.deepEqual(startCpuLines([], 2), []);
  const lines = startCpuLines(
    [
      { atSeconds: 0.25, roles: new Map([['agents', 0.4]]), machineBusySeconds: 0.5 },
      {
        atSeconds: 0.5,
        roles: new Map([
          ['agents', 0.55],
          ['pulls', 0.2],
        ]),
        machineBusySeconds: 0.95,
      },
      { atSeconds: 0.75, roles: new Map([['agents', 0.6]]) },
    ],
    2,
  );
  const rows = lines.slice(1).map((line) => line.split(/\s{2,}/).map((cell) => cell.trim()));
  assert.match(lines[0] ?? '', /from the clock\s+agents CPU-ms\s+pulls CPU-ms\s+cores busy/);
  // Windows from the clock; a role's first reading counts from zero, one missing from a reading adds
  // nothing; the cores busy need the machine's time at both ends of a window.
  assert.deepEqual(rows, [
    ['0.00-0.25 s', '400', '0', '2.00 of 2'],
    ['0.25-0.50 s', '150', '200', '1.80 of 2'],
    ['0.50-0.75 s', '50', '0', '-'],
  ]);
});
