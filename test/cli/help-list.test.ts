/**
 * `weightcast --help` lists the commands from a table (src/cli/definitions/index.ts) instead of
 * loading every definition; these tests keep that table equal to what the definitions declare.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runCli } from '../../src/cli/main.js';
import { buildProgram } from '../../src/cli/program.js';
import { memoryIo } from '../../src/cli/io.js';
import { DEFINITIONS } from '../../src/cli/definitions/index.js';

test('each command is listed with the term and description its definition declares', async () => {
  for (const definition of DEFINITIONS) {
    const program = buildProgram(memoryIo(), () => undefined, [await definition.load()]);
    const [command, ...others] = program.commands;
    assert.ok(command !== undefined && others.length === 0, definition.name);
    assert.equal(command.name(), definition.name);
    assert.equal(program.createHelp().subcommandTerm(command), definition.term, definition.name);
    assert.equal(command.description(), definition.description, definition.name);
  }
});

test('--help from the table is the help every definition together gives', async () => {
  const full = memoryIo();
  const program = buildProgram(full, () => undefined, await Promise.all(DEFINITIONS.map((d) => d.load())));
  program.outputHelp();
  const listed = memoryIo();
  assert.equal(await runCli(['--help'], listed), 0);
  assert.equal(listed.out.join(''), full.out.join(''));
  assert.match(listed.out.join(''), /pull \[options\] <src> +Download a model/);
});

test('help for one command, a mistyped command and the version still work without the definitions', async () => {
  const help = memoryIo();
  assert.equal(await runCli(['help', 'pull'], help), 0);
  assert.match(help.out.join(''), /Usage: weightcast pull \[options\] <src>/);
  assert.match(help.out.join(''), /--manifest <file>/, "pull's own options, from its definition");
  const typo = memoryIo();
  assert.equal(await runCli(['pul'], typo), 2);
  assert.match(typo.err.join(''), /unknown command 'pul'/);
  assert.match(typo.err.join(''), /pull/);
  const version = memoryIo();
  assert.equal(await runCli(['--version'], version), 0);
  assert.match(version.out.join(''), /^\d+\.\d+\.\d+\n$/);
});
