/**
 * `--ring-parents K`, shared by `scheduler` and `sim` (SwarmConfig.ringParents): the
 * option's text and its parsing, so the two commands accept and describe it alike.
 */

import type { Command } from 'commander';
import { WeightcastError } from '../errors.js';

const RING_PARENTS_MAX = 64;

export function ringParentsOption(command: Command, defaultValue: number): Command {
  return command.option(
    '--ring-parents <k>',
    'each host downloads first from the next k hosts by id, one piece at a time from each (0 = off)',
    String(defaultValue),
  );
}

/** `--ring-parents`: 0 (off) or a positive integer up to RING_PARENTS_MAX. */
export function parseRingParents(text: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isInteger(value) || value < 0 || value > RING_PARENTS_MAX) {
    throw new WeightcastError(
      'USAGE',
      `--ring-parents must be 0 (off) or an integer up to ${RING_PARENTS_MAX}, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}
