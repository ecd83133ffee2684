/**
 * Picks the origin implementation for a source string: `http(s)://` URLs read over HTTP, `file://`
 * URLs and plain paths read from the filesystem. Other schemes fail early with a clear message
 * instead of being mistaken for a relative path.
 */

import { WeightcastError } from '../errors.js';
import { HttpOrigin, type HttpOriginOptions } from './http.js';
import { LocalOrigin, type LocalOriginOptions } from './local.js';
import type { Origin } from './origin.js';

export type OpenOriginOptions = HttpOriginOptions & LocalOriginOptions;

/** `scheme://...`; one letter before a colon is a Windows drive, not a scheme. */
const SCHEME_PATTERN = /^([A-Za-z][A-Za-z0-9+.-]+):\/\//;

export function openOrigin(source: string, options: OpenOriginOptions = {}): Origin {
  const scheme = SCHEME_PATTERN.exec(source)?.[1]?.toLowerCase();
  if (scheme === undefined || scheme === 'file') return new LocalOrigin(source, localOptions(options));
  if (scheme === 'http' || scheme === 'https') return new HttpOrigin(source, options);
  throw new WeightcastError(
    'ORIGIN_UNSUPPORTED',
    `${scheme}:// origins are not supported; use an http(s):// URL, a file:// URL or a local directory path`,
    { file: source },
  );
}

function localOptions(options: OpenOriginOptions): LocalOriginOptions {
  return {
    ...(options.openFilesMax === undefined ? {} : { openFilesMax: options.openFilesMax }),
    ...(options.listEntriesMax === undefined ? {} : { listEntriesMax: options.listEntriesMax }),
  };
}
