/**
 * One agent per cache directory: a second agent started on a cache another live agent uses is
 * refused with AGENT_CACHE_IN_USE (two would append to the same journals); the lock of a killed
 * agent is taken over. Real agent processes.
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
  work = await tempDir('agent-cache-lock');
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
