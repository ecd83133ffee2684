/** Option handling shared by the commands that read from an origin or talk to a swarm service. */

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
