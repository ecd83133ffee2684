import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  HOSTS_MAX,
  INTERFACE_NAME_BYTES_MAX,
  interfaceNames,
  planTestbed,
  PlanError,
  MTU_DEFAULT,
  tbfArguments,
  tcpPayloadShare,
  testbedTag,
} from '../../bench/netns/plan.js';
import {
  lowerBoundSeconds,
  median,
  naiveFluidSeconds,
  parseMachineBusyTicks,
  parseProcStatTicks,
  renderTable,
  summarizeLeg,
} from '../../bench/netns/report.js';

const input = { tag: 'wc4194304z', hosts: HOSTS_MAX, hostMbps: 200, originMbps: 400, subnet: '10.77.0' };

test('the largest plan keeps every interface name within the kernel limit', () => {
  assert.equal(testbedTag(4194304, 25), 'wc4194304z');
  const plan = planTestbed(input);
  const names = interfaceNames(plan);
  assert.equal(names.length, 1 + 2 * (HOSTS_MAX + 2), 'a bridge, and two ends for origin, hosts and control');
  assert.equal(new Set(names).size, names.length);
  for (const name of names) assert.ok(name.length <= INTERFACE_NAME_BYTES_MAX, name);
});

test('endpoints get distinct addresses and their own caps; the origin is .1, the control machine last', () => {
  const plan = planTestbed({ ...input, hosts: 3 });
  assert.equal(plan.origin.address, '10.77.0.1');
  assert.equal(plan.origin.mbps, 400);
  assert.deepEqual(
    plan.hosts.map((h) => [h.label, h.address, h.mbps]),
    [
      ['host1', '10.77.0.2', 200],
      ['host2', '10.77.0.3', 200],
      ['host3', '10.77.0.4', 200],
    ],
  );
  assert.deepEqual(
    [plan.control.label, plan.control.address, plan.control.mbps],
    ['control', '10.77.0.5', 200],
  );
  assert.equal(new Set([plan.origin, ...plan.hosts, plan.control].map((e) => e.ns)).size, 5);
});

test('bad plans are refused before anything is created', () => {
  const cases = [
    { tag: 'WC1' },
    { tag: 'wc12345678901' },
    { hosts: 0 },
    { hosts: HOSTS_MAX + 1 },
    { hostMbps: 0 },
    { originMbps: Number.NaN },
    { subnet: '10.77' },
    { subnet: '10.77.300' },
    { mtu: 1279 },
    { mtu: 9217 },
    { mtu: 1500.5 },
  ];
  for (const change of cases) {
    assert.throws(() => planTestbed({ ...input, ...change }), PlanError, JSON.stringify(change));
  }
});

test('links run MTU 1500 unless told; TCP payload share of a cap follows the MTU', () => {
  assert.equal(planTestbed(input).mtu, MTU_DEFAULT);
  assert.equal(planTestbed({ ...input, mtu: 9000 }).mtu, 9000);
  assert.equal(tcpPayloadShare(1500), 1448 / 1514);
  assert.equal(tcpPayloadShare(9000), 8948 / 9014);
});

test('tbf buckets hold a GSO segment at low rates and 5 ms at high rates', () => {
  assert.deepEqual(tbfArguments(200), ['tbf', 'rate', '200mbit', 'burst', '131072', 'latency', '50ms']);
  assert.equal(tbfArguments(10_000)[4], String((10e9 / 8) * 0.005));
});

test('the fan-out arithmetic: bound, naive fluid time, median, summary', () => {
  const setting = { hosts: 8, totalBytes: 25e6, hostMbps: 200, originMbps: 200 };
  assert.equal(lowerBoundSeconds(setting), 1);
  assert.equal(naiveFluidSeconds(setting), 8);
  assert.equal(lowerBoundSeconds({ ...setting, originMbps: 20 }), 10);
  assert.equal(median([]), undefined);
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2);
  const summary = summarizeLeg(
    { leg: 'x', hostSeconds: [1, 2, 2, 4, 1, 1, 1, 1], hostsVerified: 8, originBytes: 50e6 },
    setting,
  );
  assert.equal(summary.tLastSeconds, 4);
  assert.equal(summary.efficiency, 0.25);
  assert.equal(summary.originRatio, 2);
  assert.equal(summary.p50Seconds, 1);
  const failed = summarizeLeg(
    { leg: 'y', hostSeconds: [1, undefined], hostsVerified: 1, originBytes: undefined },
    setting,
  );
  assert.equal(failed.tLastSeconds, undefined);
  assert.equal(failed.efficiency, undefined);
  assert.equal(failed.hostsFinished, 1);
});

test('tables pad every column', () => {
  assert.deepEqual(renderTable(['a', 'bb'], [['xyz', '1']]), [
    '| a   | bb |',
    '|-----|----|',
    '| xyz | 1  |',
  ]);
});

test('CPU ticks from /proc/PID/stat, with a command name holding spaces and parentheses', () => {
  const line =
    '2450 (node (x) y) R 2447 2447 17892 0 -1 4194304 99 0 0 0 120 30 700 50 20 0 1 0 1251763 3133440 418 0';
  assert.deepEqual(parseProcStatTicks(line), {
    user: 120,
    system: 30,
    reapedChildrenUser: 700,
    reapedChildrenSystem: 50,
  });
  assert.equal(parseProcStatTicks('2450 (cat) R 1 2'), undefined);
});

test('machine busy ticks leave out idle and iowait', () => {
  assert.equal(parseMachineBusyTicks('cpu  100 1 50 800 50 2 3 4 0 0\ncpu0 1 2 3 4 5 6 7 8\n'), 160);
  assert.equal(parseMachineBusyTicks('intr 1 2 3'), undefined);
});
