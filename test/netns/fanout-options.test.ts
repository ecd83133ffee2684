import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  LEGS_DEFAULT,
  originReadersFlags,
  parseLegs,
  parseOptions,
  resolveOriginServer,
  schedulingFlags,
  transferUnitFlags,
  UsageError,
} from '../../bench/netns/options.js';
import { SWARM_SERVICE_DEFAULTS } from '../../src/swarm/scheduler/defaults.js';
import { MTU_DEFAULT } from '../../bench/netns/plan.js';

const parse = (...argv: string[]) => {
  const options = parseOptions(argv, 'default-work-dir');
  assert.notEqual(options, 'help');
  if (options === 'help') throw new Error('unreachable');
  return options;
};

test("by default the fan-out measures the user's flow: MTU 1500, scheduler beside the origin, the baselines", () => {
  const options = parse();
  assert.equal(options.mtu, MTU_DEFAULT);
  assert.equal(options.mtu, 1500);
  assert.equal(options.schedulerOn, 'origin');
  assert.deepEqual(options.legs, ['naive', 'swarm', 'bittorrent', 'chain', 'node-chain']);
  assert.deepEqual(LEGS_DEFAULT, options.legs);
  assert.equal(options.hosts, 8);
  assert.equal(options.mbps, 200);
  assert.equal(options.originMbps, 200);
  assert.equal(options.work, 'default-work-dir');
  assert.equal(options.pullStart, 'listening', 'each pull starts once its agent listens');
  assert.equal(options.rounds, 1);
});

test('--rounds repeats the legs, within bounds', () => {
  assert.equal(parse('--rounds', '3').rounds, 3);
  for (const bad of ['0', '21', '1.5', 'x']) assert.throws(() => parse('--rounds', bad), /--rounds/);
});

test('--mtu 9000, --scheduler-on control and --warm are options', () => {
  const options = parse('--mtu', '9000', '--scheduler-on', 'control', '--warm', '--mbps', '100');
  assert.equal(options.mtu, 9000);
  assert.equal(options.schedulerOn, 'control');
  assert.deepEqual(options.legs, ['naive', 'swarm', 'swarm-warm', 'bittorrent', 'chain', 'node-chain']);
  assert.equal(options.originMbps, 100);
  assert.equal(parse('--pull-start', 'launch').pullStart, 'launch');
});

test('legs run in a fixed order, each once, whatever order they are named in', () => {
  assert.deepEqual(parseLegs('chain, swarm,chain', false), ['swarm', 'chain']);
  assert.deepEqual(parseLegs('swarm-warm', true), ['swarm-warm']);
  assert.deepEqual(parseLegs('bittorrent', true), ['swarm-warm', 'bittorrent']);
  assert.throws(() => parseLegs('swarm,torrent', false), UsageError);
  assert.throws(() => parseLegs(' , ', false), UsageError);
});

test('bad flags are usage errors', () => {
  assert.throws(() => parse('--scheduler-on', 'h1'), UsageError);
  assert.throws(() => parse('--mtu', '1000'), UsageError);
  assert.throws(() => parse('--pull-start', 'later'), /--pull-start must be listening or launch/);
  assert.throws(() => parse('--hosts', '2.5'), UsageError);
  assert.throws(() => parse('--piece-mb', '0.0000001'), UsageError);
  assert.throws(() => parse('--unknown'), TypeError);
  assert.throws(() => parse('--legs', 'swarm', '--skip-copy-out'), /--legs swarm-warm --skip-copy-out/);
  assert.deepEqual(parse('--legs', 'swarm-warm', '--skip-copy-out').legs, ['swarm-warm']);
  assert.equal(parseOptions(['--help'], '/tmp'), 'help');
});

test('the simulator predicts the swarm the scheduler runs: the same origin readers, given or not', () => {
  assert.deepEqual(originReadersFlags(parse()), [
    '--origin-readers',
    String(SWARM_SERVICE_DEFAULTS.originReaders),
  ]);
  assert.deepEqual(originReadersFlags(parse('--origin-readers', '8')), ['--origin-readers', '8']);
});

test('how to plan goes to the scheduler and the simulator alike; by default neither is told (theirs: a chain while short enough)', () => {
  assert.deepEqual(schedulingFlags(parse()), []);
  assert.deepEqual(schedulingFlags(parse('--per-piece')), ['--per-piece']);
  assert.deepEqual(schedulingFlags(parse('--ring-chain')), ['--ring-push', '--ring-chain']);
});

test('--transfer-unit goes to the scheduler alone (the simulator is given the units as its pieces)', () => {
  assert.deepEqual(schedulingFlags(parse('--transfer-unit', '2')), []);
  assert.deepEqual(transferUnitFlags(parse()), []);
  assert.deepEqual(transferUnitFlags(parse('--transfer-unit', '1')), ['--transfer-unit', '1']);
  assert.equal(parse('--transfer-unit', 'auto').transferUnit, undefined);
  assert.throws(() => parse('--transfer-unit', '0'), UsageError);
  assert.throws(() => parse('--transfer-unit', 'two'), UsageError);
});

test('the origin runs nginx on the testbed when it is installed, else weightcast serve; asked for, it must be there', () => {
  assert.equal(parse().originServer, 'auto');
  assert.equal(parse('--origin-server', 'weightcast').originServer, 'weightcast');
  assert.throws(() => parse('--origin-server', 'apache'), UsageError);
  assert.throws(() => parse('--origin-server', 'nginx', '--loopback'), /needs the netns testbed/);
  assert.deepEqual(resolveOriginServer('auto', 'netns', true), { server: 'nginx' });
  assert.deepEqual(resolveOriginServer('auto', 'netns', false), { server: 'weightcast' });
  // On loopback only weightcast's server caps the origin's rate.
  assert.deepEqual(resolveOriginServer('auto', 'loopback', true), { server: 'weightcast' });
  assert.deepEqual(resolveOriginServer('weightcast', 'netns', true), { server: 'weightcast' });
  assert.deepEqual(resolveOriginServer('nginx', 'netns', true), { server: 'nginx' });
  const missing = resolveOriginServer('nginx', 'netns', false);
  assert.ok(
    'problem' in missing && /apt-get install nginx-light/.test(missing.problem),
    JSON.stringify(missing),
  );
  assert.ok('problem' in resolveOriginServer('nginx', 'loopback', true));
});
