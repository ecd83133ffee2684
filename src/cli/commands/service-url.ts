/** The check every flag naming a weightcast service gets (light: a pull through an agent loads it). */

import { WeightcastError } from '../../errors.js';
import { httpUrl } from '../../util/http-url.js';

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
