/**
 * What `weightcast agent` checks at start, with real agent processes: one agent per cache directory
 * (a second agent started on a cache another live agent uses is refused with AGENT_CACHE_IN_USE, as
 * two would append to the same journals; the lock of a killed agent is taken over), and its
 * destination roots.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CLI, startProcess, stopProcess, type Proc } from '../../scripts/cluster.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { tempDir } from '../helpers/fixtures.js';

const run = promisify(execFile);

let work: { path: string; cleanup: () => Promise<void> };
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('agent-start');
  scheduler = await startScheduler();
});

after(async () => {
  await scheduler.close();
  await work.cleanup();
});

describe('an agent cache', { timeout: 60_000 }, () => {
  it('serves one agent: a second is refused while the first lives, and takes over once it was killed', async () => {
    const cache = join(work.path, 'cache');
    const agentArgv = [CLI, 'agent', '--scheduler', scheduler.url, '--cache', cache, '--port', '0'];
    let first: Proc | undefined;
    let third: Proc | undefined;
    try {
      first = await startProcess(agentArgv, /listening on (http:\/\/\S+)/, 'first agent');
      const second = await run(process.execPath, agentArgv, { timeout: 20_000 }).then(
        () => assert.fail('a second agent on the same cache should be refused'),
        (error: { code?: number; stderr?: string }) => error,
      );
      assert.equal(second.code, 1, second.stderr);
      assert.match(
        second.stderr ?? '',
        new RegExp(`AGENT_CACHE_IN_USE: another agent \\(PID ${first.child.pid}\\) uses the cache .*--cache`),
      );
      first.child.kill('SIGKILL');
      await new Promise((resolve) => first?.child.once('exit', resolve));
      third = await startProcess(agentArgv, /listening on (http:\/\/\S+)/, 'agent after the kill');
    } finally {
      await stopProcess(first, 'SIGKILL');
      await stopProcess(third);
    }
  });
});

describe('weightcast agent --destination-root', { timeout: 30_000 }, () => {
  it('says at start when a root does not exist or is not a directory, and starts anyway', async () => {
    let agent: Proc | undefined;
    try {
      const missing = join(work.path, 'nope');
      agent = await startProcess(
        [
          CLI,
          'agent',
          '--scheduler',
          scheduler.url,
          '--cache',
          join(work.path, 'cache'),
          '--port',
          '0',
          '--destination-root',
          missing,
          '--destination-root',
          work.path,
          '--destination-root',
          CLI,
        ],
        /listening on (http:\/\/\S+)/,
        'agent',
      );
      // stderr and stdout are separate pipes: the warnings may arrive just after the listening line.
      const said = (text: string): boolean => agent?.lines.some((line) => line.includes(text)) === true;
      for (let wait = 0; wait < 40 && !said('is not a directory'); wait++)
        await new Promise((resolve) => setTimeout(resolve, 25));
      assert.ok(
        said(`--destination-root ${missing} does not exist: pulls into it are copied out`),
        agent.lines.join('\n'),
      );
      assert.ok(said(`--destination-root ${CLI} is not a directory`), agent.lines.join('\n'));
      assert.ok(!said(`--destination-root ${work.path} `), 'an existing directory is not mentioned');
    } finally {
      await stopProcess(agent);
    }
  });
});
