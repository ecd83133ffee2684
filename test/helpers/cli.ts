/** Running the built `weightcast` CLI as a user would, in a process of its own. */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { WEIGHTCAST } from '../../scripts/cluster.js';

const run = promisify(execFile);

export interface FailedCli {
  code?: number;
  stdout?: string;
  stderr?: string;
}

/** Runs `weightcast ARGS`, which must fail (within 30 s); returns its exit code and output. */
export async function failingCli(args: readonly string[], env?: NodeJS.ProcessEnv): Promise<FailedCli> {
  return run(WEIGHTCAST, [...args], {
    timeout: 30_000,
    ...(env === undefined ? {} : { env }),
  }).then(
    () => assert.fail(`weightcast ${args.join(' ')} should fail`),
    (error: FailedCli) => error,
  );
}
