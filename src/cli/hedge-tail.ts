/**
 * `--hedge-tail N`, shared by `scheduler` and `sim` (SwarmConfig.hedgeTailPieces): the option's
 * text and its parsing, so the two commands accept and describe it alike.
 */

import type { Command } from 'commander';
import { WeightcastError } from '../errors.js';

const HEDGE_TAIL_MAX = 4096;

export function hedgeTailOption(command: Command, defaultValue: number): Command {
  return command.option(
    '--hedge-tail <n>',
    "hedge each host's last N pieces: a second copy from another parent (0 = never)",
    String(defaultValue),
  );
}

/** `--hedge-tail`: 0 (never) or a positive integer up to HEDGE_TAIL_MAX. */
export function parseHedgeTail(text: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isInteger(value) || value < 0 || value > HEDGE_TAIL_MAX) {
    throw new WeightcastError(
      'USAGE',
      `--hedge-tail must be 0 (never) or an integer up to ${HEDGE_TAIL_MAX}, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}
