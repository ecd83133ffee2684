/**
 * `agent` and `pull` command lines are read without commander when they read cleanly
 * (src/cli/command-spec.ts). Whatever the fast reading accepts, commander must read the same way:
 * each line below, and random lines built from the commands' own options, go through both.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Command, CommanderError } from 'commander';
import { parseCommandLine, type CommandSpec, type ParsedFlags } from '../../src/cli/command-spec.js';
import { registerSpec } from '../../src/cli/definitions/index.js';
import { AGENT_COMMAND } from '../../src/cli/definitions/agent.js';
import { PULL_COMMAND } from '../../src/cli/definitions/pull.js';
import { memoryIo } from '../../src/cli/io.js';
import { Random } from '../../src/swarm/core/random.js';

type Reading = { args: string[]; flags: ParsedFlags } | 'rejected';

/** What commander gives the command's action for `argv`, or 'rejected' (a usage error, help). */
async function commanderReading(spec: CommandSpec, argv: readonly string[]): Promise<Reading> {
  let reading: Reading = 'rejected';
  const io = memoryIo();
  const program = new Command('weightcast')
    .exitOverride()
    .configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
  registerSpec({
    ...spec,
    run: (args, flags) => {
      reading = { args: [...args], flags: { ...flags } };
      return Promise.resolve(0);
    },
  })(program, io, () => undefined);
  try {
    await program.parseAsync([spec.name, ...argv], { from: 'user' });
  } catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    return 'rejected';
  }
  return reading;
}

async function sameAsCommander(spec: CommandSpec, argv: readonly string[]): Promise<boolean> {
  const fast = parseCommandLine(spec, argv);
  if (fast === undefined) return false;
  assert.deepEqual(fast, await commanderReading(spec, argv), `weightcast ${spec.name} ${argv.join(' ')}`);
  return true;
}

const AGENT_LINES: readonly (readonly string[])[] = [
  ['--scheduler', 'http://10.0.0.1:7000', '--cache', '/var/cache/wc'],
  [
    '--scheduler=http://h:7000',
    '--cache',
    'c',
    '--port',
    '7100',
    '--host',
    '10.77.0.2',
    '--upload-mbps',
    '200',
    '--download-mbps',
    '200',
    '--destination-root',
    '/a',
    '--destination-root=/b',
    '--no-direct-io',
    '--json',
    '--role',
    'seed',
    '--insecure',
    '--cluster-token-file',
    '/t',
    '--request-timeout-s',
    '5',
    '--origin-retry-s',
    '9',
    '--inject-corrupt-uploads',
  ],
  ['--cache', 'c', '--scheduler', 'http://h:1', '--port', '1', '--port', '2'],
];

const PULL_LINES: readonly (readonly string[])[] = [
  [
    'http://origin/model/',
    '--to',
    '/models/m',
    '--manifest',
    'm.json',
    '--agent',
    'http://10.77.0.2:7100',
    '--json',
  ],
  ['./model', '--to', 'out', '--no-agent', '--no-direct-io', '--memory-mb', '64'],
  ['--to=out', 'sha256:ab', '--seeds', 'http://s:7000', '--agent', 'http://a', '--no-agent'],
  ['src', '--to', ''],
  ['src', '--to', 'out', '--link', '--token', 'x', '--listen', '0.0.0.0:7200', '--scheduler', 'http://s'],
];

test('the command lines users run read the same without commander', async () => {
  for (const argv of AGENT_LINES) assert.ok(await sameAsCommander(AGENT_COMMAND, argv), argv.join(' '));
  for (const argv of PULL_LINES) assert.ok(await sameAsCommander(PULL_COMMAND, argv), argv.join(' '));
});

test('help, mistakes and what the fast reading does not handle are left to commander', async () => {
  const cases: [CommandSpec, string[]][] = [
    [PULL_COMMAND, ['src', '--to', 'out', '--help']],
    [PULL_COMMAND, ['src', '-h']],
    [PULL_COMMAND, ['src']], // --to is required
    [PULL_COMMAND, ['--to', 'out']], // <src> is missing
    [PULL_COMMAND, ['a', 'b', '--to', 'out']], // one argument too many
    [PULL_COMMAND, ['src', '--to']], // no value
    [PULL_COMMAND, ['src', '--to', '--json']], // a value that begins with a dash
    [PULL_COMMAND, ['src', '--to', 'out', '--jsn']], // unknown option
    [PULL_COMMAND, ['src', '--to', 'out', '--json=yes']], // a value for a switch
    [PULL_COMMAND, ['src', '--to', 'out', '--', '--json']],
    [AGENT_COMMAND, ['--scheduler', 'http://h', '--cache', 'c', '--role', 'leader']], // not a choice
    [AGENT_COMMAND, ['--scheduler', 'http://h']], // --cache is required
    [AGENT_COMMAND, ['--version']],
  ];
  for (const [spec, argv] of cases) {
    assert.equal(parseCommandLine(spec, argv), undefined, `${spec.name} ${argv.join(' ')}`);
  }
  // Commander itself refuses most of these; the fast reading never accepts what it refuses.
  assert.equal(await commanderReading(PULL_COMMAND, ['src']), 'rejected');
  assert.equal(
    await commanderReading(AGENT_COMMAND, ['--scheduler', 'h', '--cache', 'c', '--role', 'x']),
    'rejected',
  );
});

const VALUES = ['x', '7100', 'http://h:1', '', 'swarm', 'seed', '-1', '--json', 'a=b'];

function randomLine(spec: CommandSpec, next: () => number): string[] {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
  const line: string[] = [];
  const words = 1 + Math.floor(next() * 8);
  for (let word = 0; word < words; word++) {
    const roll = next();
    if (roll < 0.15) {
      line.push(pick(['src', 'other', '-', '-x', '--']));
      continue;
    }
    const option = pick(spec.options);
    const flag = option.flags.split(' ')[0] ?? '';
    const value = pick(option.choices ?? VALUES);
    if (!option.flags.includes(' <')) line.push(roll < 0.2 ? `${flag}=${value}` : flag);
    else if (roll < 0.4) line.push(`${flag}=${value}`);
    else if (roll < 0.95) line.push(flag, value);
    else line.push(flag);
  }
  // Most lines carry what each command requires, so many are read both ways.
  if (next() < 0.8) {
    for (const option of spec.options.filter((o) => o.required === true))
      line.push(option.flags.split(' ')[0] ?? '', 'v');
    if (spec.args.length > 0 && !line.includes('src')) line.unshift('src');
  }
  return line;
}

test('random command lines: whatever the fast reading accepts, commander reads the same', async () => {
  const seed = 20261207;
  console.log(`seed ${seed}`);
  const generator = new Random(seed);
  const next = (): number => generator.nextFloat();
  let read = 0;
  const lines = 1500;
  for (let index = 0; index < lines; index++) {
    const spec = next() < 0.5 ? AGENT_COMMAND : PULL_COMMAND;
    if (await sameAsCommander(spec, randomLine(spec, next))) read++;
  }
  // Both outcomes were exercised: a generator whose lines all fell to commander would test nothing.
  assert.ok(read > lines * 0.1 && read < lines * 0.9, `${read} of ${lines} lines read without commander`);
});
