/** Option handling shared by the commands that read from an origin or talk to a swarm service. */

import { WeightcastError } from '../../errors.js';
import { httpUrl } from '../../util/http-url.js';
import { openOrigin } from '../../origin/open.js';
import type { Origin, OriginEntry } from '../../origin/origin.js';
import type { Progress } from '../progress.js';

export interface OriginFlags {
  token?: string;
  connections?: number;
  /** Known files (from a manifest): an HTTP origin then needs no listing. */
  files?: OriginEntry[];
}

/** Opens SRC with the token from --token, WEIGHTCAST_TOKEN or HF_TOKEN, logging retries. */
export function openSource(source: string, flags: OriginFlags, progress?: Progress): Origin {
  const token = flags.token ?? process.env['WEIGHTCAST_TOKEN'] ?? process.env['HF_TOKEN'];
  return openOrigin(source, {
    ...(token !== undefined && token !== '' ? { token } : {}),
    ...(flags.connections !== undefined ? { connections: flags.connections } : {}),
    ...(flags.files !== undefined ? { files: flags.files } : {}),
    onRetry: (info) =>
      progress?.log(
        `weightcast: retrying ${info.path} in ${Math.round(info.delayMs)} ms (attempt ${info.attempt}): ${info.reason}`,
      ),
  });
}

/**
 * A URL flag naming a weightcast service (--scheduler, --agent, --advertise): an http(s) URL, or a
 * USAGE error that says what was given. Without this check a typo surfaced later as an unreachable
 * scheduler, and an agent ran on without one.
 */
export function serviceUrlFlag(text: string, flag: string, example: string): string {
  if (httpUrl(text) === undefined) {
    throw new WeightcastError(
      'USAGE',
      `${flag} must be an http(s) URL such as ${example}, got ${JSON.stringify(text)}`,
    );
  }
  return text;
}
