/**
 * The benchmarks' services listen on the testbed's addresses, not loopback, so they need cluster
 * credentials (a service refuses to start there without one). Random tokens are made once per run
 * and handed to every child through the environment, unless the caller set its own.
 */

import { randomBytes } from 'node:crypto';

export function ensureClusterTokens(env: NodeJS.ProcessEnv = process.env): void {
  env['WEIGHTCAST_CLUSTER_TOKEN'] ||= randomBytes(32).toString('hex');
  env['WEIGHTCAST_OPERATOR_TOKEN'] ||= randomBytes(32).toString('hex');
}
