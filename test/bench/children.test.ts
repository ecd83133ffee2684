import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { firstMatch } from '../../bench/netns/children.js';

/** A child whose events come in the order the test says: only what `firstMatch` uses of one. */
function scriptedChild(): { child: ChildProcess; stdout: PassThrough } {
  const stdout = new PassThrough();
  const child = Object.assign(new EventEmitter(), { stdout }) as unknown as ChildProcess;
  return { child, stdout };
}

test('firstMatch still finds a line that is read after the child exited', async () => {
  // Node may report a child's exit before it has read the last bytes of the child's stdout pipe.
  const { child, stdout } = scriptedChild();
  const match = firstMatch(child, /^chain: received$/, 5000, 'host');
  child.emit('exit', 0, null);
  stdout.end('chain: received\n');
  assert.equal((await match)[0], 'chain: received');
});

test('firstMatch fails once stdout ended after the exit without the line', async () => {
  const { child, stdout } = scriptedChild();
  const match = firstMatch(child, /^done$/, 5000, 'host');
  child.emit('exit', 1, null);
  stdout.end('something else\n');
  await assert.rejects(match, /host exited before printing \/\^done\$\//);
});

test('firstMatch reads the last line of a real process that exits right after printing it', async () => {
  for (let run = 0; run < 20; run++) {
    const child = spawn('sh', ['-c', 'echo "chain: received"'], { stdio: ['ignore', 'pipe', 'ignore'] });
    const match = await firstMatch(child, /^chain: received$/, 5000, `run ${run}`);
    assert.equal(match[0], 'chain: received');
  }
});
