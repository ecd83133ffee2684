/**
 * Scheduling flags that `scheduler` and `sim` share (SwarmConfig.ringParents and hedgeTailPieces):
 * each option's text and its parsing live here once, so the two commands accept and describe them
 * alike.
 */

import type { Command } from 'commander';
import { WeightcastError } from '../errors.js';
import { ASSIGNMENT_PIECES_MAX } from '../swarm/wire/limits.js';

const RING_PARENTS_MAX = 64;
const HEDGE_TAIL_MAX = 4096;

export function ringParentsOption(command: Command, defaultValue: number): Command {
  return command.option(
    '--ring-parents <k>',
    'each host downloads first from the next k hosts by id, one piece at a time from each (0 = off)',
    String(defaultValue),
  );
}

export function hedgeTailOption(command: Command, defaultValue: number): Command {
  return command.option(
    '--hedge-tail <n>',
    "hedge each host's last N pieces: a second copy from another parent (0 = never)",
    String(defaultValue),
  );
}

export function transferUnitOption(command: Command): Command {
  return command.option(
    '--transfer-unit <pieces>',
    'pieces per transfer: auto (runs of about 1 MiB where a model keeps 1024 of them), or N (1 = every piece alone)',
    'auto',
  );
}

/** `--transfer-unit`: undefined for auto, else 1 to ASSIGNMENT_PIECES_MAX pieces. */
export function parseTransferUnit(text: string): number | undefined {
  if (text === 'auto') return undefined;
  const value = Number(text);
  if (text.trim() === '' || !Number.isInteger(value) || value < 1 || value > ASSIGNMENT_PIECES_MAX) {
    throw new WeightcastError(
      'USAGE',
      `--transfer-unit must be auto or a number of pieces from 1 to ${ASSIGNMENT_PIECES_MAX}, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}

/** `--ring-parents`: 0 (off) or a positive integer up to RING_PARENTS_MAX. */
export function parseRingParents(text: string): number {
  return parseCount(text, '--ring-parents', 'off', RING_PARENTS_MAX);
}

/** `--hedge-tail`: 0 (never) or a positive integer up to HEDGE_TAIL_MAX. */
export function parseHedgeTail(text: string): number {
  return parseCount(text, '--hedge-tail', 'never', HEDGE_TAIL_MAX);
}

function parseCount(text: string, flag: string, zeroMeans: string, max: number): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isInteger(value) || value < 0 || value > max) {
    throw new WeightcastError(
      'USAGE',
      `${flag} must be 0 (${zeroMeans}) or an integer up to ${max}, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}
