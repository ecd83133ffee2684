/**
 * Which files of a directory make it a model to readers that take a directory (Hugging Face loaders,
 * `inspect`, `manifest`, a directory pull): every `*.safetensors` file and the safetensors index at its
 * top level. A model written into a directory that still holds such files of another model (shard
 * 3 of 3 when the new one has 2) would leave a mix those readers take as one model, so writers refuse
 * such a directory. Pure: model-directory-file.ts lists the directory.
 */

import { WeightcastError } from '../errors.js';
import { INDEX_FILE_NAME } from './index-json.js';

/** Names shown in a refusal; the details carry them all. */
const NAMES_SHOWN_MAX = 5;

export function isModelFileName(name: string): boolean {
  return name.endsWith('.safetensors') || name === INDEX_FILE_NAME;
}

/**
 * The model files among `present` (a directory's top-level names) that writing the files `written`
 * (paths relative to the directory) would leave in place, sorted.
 */
export function staleModelFiles(present: readonly string[], written: Iterable<string>): string[] {
  const replaced = new Set(written);
  return present.filter((name) => isModelFileName(name) && !replaced.has(name)).sort();
}

/** USAGE (exit 2): nothing is written, and nothing of the user's is removed. */
export function staleModelFilesError(dir: string, stale: readonly string[]): WeightcastError {
  const shown = stale.slice(0, NAMES_SHOWN_MAX).join(', ');
  const more = stale.length > NAMES_SHOWN_MAX ? ` and ${stale.length - NAMES_SHOWN_MAX} more` : '';
  const them = stale.length === 1 ? 'it' : 'them';
  return new WeightcastError(
    'USAGE',
    `${dir} already holds model files the new model would not replace (${shown}${more}); ` +
      `readers would take them for part of it: remove ${them} or choose an empty directory`,
    { file: dir, stale: [...stale] },
  );
}
