/**
 * Paths that come from outside (manifests, index files, HTTP listings) name files inside a model
 * directory. They must never escape it: no absolute paths, no `..`, no NUL, no backslashes, no empty
 * segments. Every such path goes through `assertSafeRelativePath` before it touches a filesystem.
 */

import { WeightcastError } from '../errors.js';

export const PATH_BYTES_MAX = 1024;

export function safeRelativePathProblem(path: string): string | undefined {
  if (typeof path !== 'string' || path.length === 0) return 'is empty';
  if (Buffer.byteLength(path, 'utf8') > PATH_BYTES_MAX) return `is longer than ${PATH_BYTES_MAX} bytes`;
  if (path.includes('\0')) return 'contains a NUL byte';
  if (path.includes('\\')) return 'contains a backslash';
  if (path.startsWith('/')) return 'is absolute';
  if (/^[A-Za-z]:/.test(path)) return 'has a drive letter';
  for (const segment of path.split('/')) {
    if (segment === '') return 'has an empty segment';
    if (segment === '.' || segment === '..') return `has a '${segment}' segment`;
  }
  return undefined;
}

export function assertSafeRelativePath(path: string, context: string): void {
  const problem = safeRelativePathProblem(path);
  if (problem !== undefined) {
    throw new WeightcastError('MANIFEST_UNSAFE_PATH', `${context}: path ${JSON.stringify(path)} ${problem}`, {
      file: path,
    });
  }
}
