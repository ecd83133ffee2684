/** `--manifest FILE` as the commands read it: a file the user named that is not there is bad input. */

import { isWeightcastError, WeightcastError } from '../../errors.js';
import { loadManifest, type LoadManifestOptions, type Manifest } from '../../manifest/manifest.js';

/** Why a path the user named cannot be opened, when that is bad input rather than a failing disk. */
const NAMED_FILE_PROBLEMS: Readonly<Record<string, string>> = {
  ENOENT: 'no such file',
  ENOTDIR: 'no such file (a part of the path is not a directory)',
  EISDIR: 'is a directory, not a manifest file',
};

/**
 * `--manifest FILE`: a missing file or a directory named there is a bad flag value (exit 2); a
 * file that exists but cannot be read stays an IO error.
 */
export async function loadManifestFlag(path: string, options: LoadManifestOptions = {}): Promise<Manifest> {
  try {
    return await loadManifest(path, options);
  } catch (error) {
    const errno = isWeightcastError(error, 'IO')
      ? (error.cause as { code?: unknown } | undefined)?.code
      : undefined;
    const problem = typeof errno === 'string' ? NAMED_FILE_PROBLEMS[errno] : undefined;
    if (problem === undefined) throw error;
    throw new WeightcastError('USAGE', `--manifest ${path}: ${problem}`, { file: path }, { cause: error });
  }
}
