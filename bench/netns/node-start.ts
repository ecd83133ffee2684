/**
 * What NODE_EXTRA_CA_CERTS costs each Node.js process the benchmarks start. Node 20 reads that file
 * at every process start, before any JavaScript runs: it builds its whole root certificate store
 * (its bundled CAs) and adds the file's certificates to it, whether the process ever opens a TLS
 * connection or not. The `weightcast` command (bin/weightcast) keeps the variable from Node's start
 * and reads the file at its first TLS connection instead, which the benchmarks' plain-http legs never
 * make; other Node processes they start (the node-chain relays, the join clients) still pay it. The
 * benchmarks run in the environment they were given; this measures the difference, and
 * `--node-extra-ca-certs unset` shows the flow without the variable at all, beside the default.
 */

import { spawnSync } from 'node:child_process';
import { BenchUsageError } from '../bench-args.js';
import { median } from './report.js';

export const NODE_EXTRA_CA_CERTS = 'NODE_EXTRA_CA_CERTS';
export const NODE_EXTRA_CA_CHOICES = ['inherit', 'unset'] as const;
export type NodeExtraCa = (typeof NODE_EXTRA_CA_CHOICES)[number];

/** `--node-extra-ca-certs VALUE`, or a usage error. */
export function parseNodeExtraCa(value: string): NodeExtraCa {
  const choice = NODE_EXTRA_CA_CHOICES.find((known) => known === value);
  if (choice === undefined)
    throw new BenchUsageError(
      `--node-extra-ca-certs must be ${NODE_EXTRA_CA_CHOICES.join(' or ')}, got ${value}`,
    );
  return choice;
}

/** Runs of `node -e` measured each way (alternating), and how long one may take. */
const RUNS = 7;
const RUN_TIMEOUT_MS = 10_000;

/**
 * CPU (user + system, ms) a Node process has used by the time its first line of JavaScript runs: it
 * reads its own getrusage, which counts from exec, start-up included. Undefined if it fails.
 */
function startCpuMs(env: NodeJS.ProcessEnv): number | undefined {
  const result = spawnSync(
    process.execPath,
    ['-e', 'const u = process.cpuUsage(); process.stdout.write(String((u.user + u.system) / 1000))'],
    { env, encoding: 'utf8', timeout: RUN_TIMEOUT_MS },
  );
  const ms = Number(result.stdout);
  return result.status === 0 && Number.isFinite(ms) && ms > 0 ? ms : undefined;
}

export interface NodeStartCost {
  /** Median CPU ms a Node process used before its first line with the variable set, and without. */
  withMs: number;
  withoutMs: number;
}

/** Measures a Node process's start with and without `file` as NODE_EXTRA_CA_CERTS. */
export function measureNodeStart(file: string): NodeStartCost | undefined {
  const without: NodeJS.ProcessEnv = { ...process.env };
  delete without[NODE_EXTRA_CA_CERTS];
  const withIt: NodeJS.ProcessEnv = { ...process.env, [NODE_EXTRA_CA_CERTS]: file };
  const withMs: number[] = [];
  const withoutMs: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const a = startCpuMs(withIt);
    const b = startCpuMs(without);
    if (a !== undefined) withMs.push(a);
    if (b !== undefined) withoutMs.push(b);
  }
  const w = median(withMs);
  const wo = median(withoutMs);
  return w === undefined || wo === undefined ? undefined : { withMs: w, withoutMs: wo };
}

/**
 * Applies the choice to this process's environment (which every child inherits) and returns the
 * line the report prints, or undefined when the variable is not set at all.
 */
export function applyNodeExtraCa(choice: NodeExtraCa): string | undefined {
  const file = process.env[NODE_EXTRA_CA_CERTS];
  if (file === undefined || file === '') return undefined;
  const cost = measureNodeStart(file);
  const costText =
    cost === undefined
      ? 'its cost was not measured (a `node -e` run failed)'
      : `a Node process used ${cost.withMs.toFixed(0)} ms of CPU before its first line with it, ${cost.withoutMs.toFixed(0)} ms without (median of ${RUNS} each, measured now)`;
  if (choice === 'unset') {
    delete process.env[NODE_EXTRA_CA_CERTS];
    return `${NODE_EXTRA_CA_CERTS} is set in this environment, and --node-extra-ca-certs unset removed it for every process the benchmark started: ${costText}`;
  }
  return (
    `${NODE_EXTRA_CA_CERTS} is set in this environment and every process the benchmark starts inherits it. ` +
    `The weightcast command keeps it from Node's start (bin/weightcast) and loads it only for a TLS connection; ` +
    `any other Node process loads it at start: ${costText}. --node-extra-ca-certs unset runs without it`
  );
}
