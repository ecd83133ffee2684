/** Option handling shared by the commands that read from an origin or talk to a swarm service. */

import { WeightcastError } from '../../errors.js';
import { openOrigin } from '../../origin/open.js';
import type { Origin, OriginEntry } from '../../origin/origin.js';
import { originRetryReporter, type Progress } from '../progress.js';
import type { ClientTls } from '../../auth/transport.js';

export interface OriginFlags {
  token?: string;
  connections?: number;
  /** `--origin-retry-s`: how long one read waits out an origin outage, in seconds. */
  originRetryS?: string;
  /** Known files (from a manifest): an HTTP origin then needs no listing. */
  files?: OriginEntry[];
  /** An https:// origin's CA to trust (and a client certificate to present), from --tls-*. */
  tls?: ClientTls | undefined;
}

/** Opens SRC with the token from --token, WEIGHTCAST_TOKEN or HF_TOKEN, logging retries. */
export function openSource(source: string, flags: OriginFlags, progress?: Progress): Origin {
  const token = flags.token ?? process.env['WEIGHTCAST_TOKEN'] ?? process.env['HF_TOKEN'];
  return openOrigin(source, {
    ...(token !== undefined && token !== '' ? { token } : {}),
    ...(flags.connections !== undefined ? { connections: flags.connections } : {}),
    ...(flags.files !== undefined ? { files: flags.files } : {}),
    ...(flags.tls !== undefined ? { tls: flags.tls } : {}),
    ...(flags.originRetryS !== undefined ? { retryBudgetMs: originRetryBudgetMs(flags.originRetryS) } : {}),
    ...(progress === undefined
      ? {}
      : { onRetry: originRetryReporter((line) => progress.log(`weightcast: ${line}`)) }),
  });
}

/** `--origin-retry-s S` in milliseconds (0: fail at the first transient error). */
export function originRetryBudgetMs(text: string): number {
  const seconds = Number(text);
  if (!/^\d+(\.\d+)?$/.test(text.trim()) || !Number.isFinite(seconds)) {
    throw new WeightcastError(
      'USAGE',
      `--origin-retry-s must be a number of seconds, got ${JSON.stringify(text)}`,
    );
  }
  return Math.round(seconds * 1000);
}

/** A service's --host that this machine cannot listen on is a bad flag value, not a failed job. */
export function listenError(error: unknown, host: string): unknown {
  // listenOn wraps the system error in IO ("cannot listen on ..."): its errno is the cause's.
  const cause = error instanceof WeightcastError ? error.cause : error;
  const code = (cause as { code?: unknown } | null | undefined)?.code;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME')
    return new WeightcastError('USAGE', `--host ${host}: no such host name or address`, {}, { cause: error });
  if (code === 'EADDRNOTAVAIL')
    return new WeightcastError(
      'USAGE',
      `--host ${host}: not an address of this machine`,
      {},
      { cause: error },
    );
  return error;
}
