/** Parsing and printing byte sizes and rates the way operators write them (16MiB, 1.5 GB/s). */

import { WeightcastError } from '../errors.js';

const UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1000,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1000 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1000 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tb: 1000 ** 4,
  tib: 1024 ** 4,
};

/** `16MiB`, `16M` (binary), `16MB` (decimal), `4096` -> bytes. */
export function parseByteSize(text: string, what: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = UNITS[(match?.[2] ?? '').toLowerCase()];
  if (match === null || unit === undefined) {
    throw new WeightcastError(
      'USAGE',
      `${what}: cannot read ${JSON.stringify(text)} as a size (try 16MiB or 1048576)`,
    );
  }
  const bytes = Math.round(Number(match[1]) * unit);
  if (!Number.isSafeInteger(bytes)) throw new WeightcastError('USAGE', `${what}: ${text} is too large`);
  return bytes;
}

export function parsePositiveInt(text: string, what: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < 1) {
    throw new WeightcastError('USAGE', `${what} must be a positive integer, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** An optional `--*-mbps` flag (Mbit/s) as bytes per second; undefined when the flag is absent. */
export function parseMbps(text: string | undefined, what: string): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) {
    throw new WeightcastError('USAGE', `${what} must be a positive number, got ${text}`);
  }
  return (value * 1_000_000) / 8;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  // Under 1 KiB: whole bytes as they are, a fraction (a rate) with two digits at most.
  if (unit === 0) return `${Number.isInteger(bytes) ? bytes : bytes.toFixed(Math.abs(bytes) < 10 ? 2 : 1)} B`;
  return `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

export function formatRate(bytes: number, seconds: number): string {
  if (seconds <= 0) return 'n/a';
  return `${formatBytes(bytes / seconds)}/s`;
}

export function formatSeconds(seconds: number): string {
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
  const minutes = Math.floor(seconds / 60);
  return `${minutes} min ${Math.round(seconds - minutes * 60)} s`;
}

/** `1 file`, `2 files`: a count with its noun (one that takes an s) in the right number. */
export function countOf(count: number, noun: string): string {
  return `${count} ${count === 1 ? noun : `${noun}s`}`;
}
