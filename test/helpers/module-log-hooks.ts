/**
 * The resolve hook behind module-log.ts. It runs on the loader's own thread and writes each line
 * synchronously, so nothing is lost when the process exits right after its last import.
 */

import { appendFileSync } from 'node:fs';
import type { InitializeHook, ResolveHook } from 'node:module';

let logPath = '';

export const initialize: InitializeHook<{ path: string }> = (data) => {
  logPath = data.path;
};

export const resolve: ResolveHook = async (specifier, context, nextResolve) => {
  const resolved = await nextResolve(specifier, context);
  appendFileSync(logPath, `${context.parentURL ?? '(entry)'} -> ${resolved.url}\n`);
  return resolved;
};
