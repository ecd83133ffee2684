/**
 * Runs a route script (dist/src/cli/route/NAME.cjs, made by `npm run build`: `agent`'s and `pull`'s
 * usual routes in one file each) with V8's compiled code kept beside it.
 *
 * Why: a fan-out starts an agent and a pull on every host at once, and on few cores the last host's
 * first piece waits for all of their starts. Compiling the route's functions was a large part of
 * what is ours in a start, and Node 20 keeps compiled code only for scripts, not ES modules. So the
 * route is a script compiled here with `cachedData`. `npm run build` writes the caches
 * (scripts/warm-route-cache.ts), and a process that had no usable cache writes one as it ends
 * (`agent-start --join pull`, medians of 9: agent CPU to its first piece 82-86 -> 68-70 ms, pull
 * 58-62 -> 52-53; docs/measurements/2026-12-07-code-cache.md).
 *
 * The cache file's name holds the script's size and modification time, Node's version and the
 * architecture, as Python keys its compiled files by the source's size and time: V8 checks its own
 * version and flags and the script's length, not its text (a script of the same length ran the old
 * code from a cache in a check), so a cache is never offered to another build of the script. It sits beside the script, which the same user installed:
 * no other user can give it compiled code. Where the directory cannot be written (a read-only
 * install) nothing is written and every start compiles, as before. A cache V8 rejects (another V8,
 * other flags, a damaged file) costs nothing but the compile, and is written again.
 */

import { readFileSync, readdirSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Script } from 'node:vm';

export type CacheState = 'used' | 'rejected' | 'absent';

export interface LoadedRoute {
  main: (argv: string[]) => Promise<number>;
  /** Whether compiled code came from the cache. */
  cache: CacheState;
  /** Writes the cache when none was used (all the code compiled so far); false when it could not. */
  saveCache: () => boolean;
}

const CACHE_SUFFIX = '.v8cache';

/** The cache file of `file` as it is now (its size and modification time) under this Node. */
export function cacheFileOf(file: string): string {
  const { size, mtimeMs } = statSync(file);
  const key = `${size}-${mtimeMs}-${process.version}-${process.arch}`.replace(/[^a-zA-Z0-9.-]/g, '_');
  return `${file}.${key}${CACHE_SUFFIX}`;
}

/** Compiles and runs the route script `file` (with its cache when there is a usable one). */
export function loadRoute(file: string): LoadedRoute {
  const cacheFile = cacheFileOf(file);
  let cachedData: Buffer | undefined;
  try {
    cachedData = readFileSync(cacheFile);
  } catch {
    cachedData = undefined;
  }
  const script = new Script(
    `(function (exports, require, module, __filename, __dirname, __routeImport) {${readFileSync(file, 'utf8')}\n})`,
    { filename: file, ...(cachedData === undefined ? {} : { cachedData }) },
  );
  const cache: CacheState =
    cachedData === undefined ? 'absent' : script.cachedDataRejected === true ? 'rejected' : 'used';
  const module = { exports: {} as { main?: unknown } };
  const url = pathToFileURL(file);
  // The route's lazy imports: its own relative to it, packages as this module finds them (the same).
  const routeImport = (specifier: string): Promise<unknown> =>
    import(specifier.startsWith('.') ? new URL(specifier, url).href : specifier);
  (script.runInThisContext() as (...args: unknown[]) => void)(
    module.exports,
    createRequire(file),
    module,
    file,
    dirname(file),
    routeImport,
  );
  const main = module.exports.main;
  if (typeof main !== 'function') throw new Error(`${file} exports no main function`);
  return {
    main: main as LoadedRoute['main'],
    cache,
    saveCache: () => cache === 'used' || writeCache(file, cacheFile, script.createCachedData()),
  };
}

/** Writes `data` to `cacheFile` whole (a temporary file renamed) and removes the script's older caches. */
function writeCache(file: string, cacheFile: string, data: Buffer): boolean {
  const temporary = `${cacheFile}.${process.pid}.tmp`;
  try {
    writeFileSync(temporary, data);
    renameSync(temporary, cacheFile);
  } catch {
    try {
      unlinkSync(temporary);
    } catch {
      // Never written.
    }
    return false;
  }
  const prefix = `${basename(file)}.`;
  try {
    for (const name of readdirSync(dirname(file))) {
      const path = join(dirname(file), name);
      if (name.startsWith(prefix) && name.endsWith(CACHE_SUFFIX) && path !== cacheFile) unlinkSync(path);
    }
  } catch {
    // Another process removed it first; the newest stays either way.
  }
  return true;
}

/** bin/weightcast.cjs's run of a route: the command's exit code, the cache written if it was not used. */
export async function runRoute(file: string, argv: string[]): Promise<number> {
  const route = loadRoute(file);
  const code = await route.main(argv);
  route.saveCache();
  return code;
}
