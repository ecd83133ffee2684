/**
 * Preload for a child process (`node --import .../module-log.js`): records every module the
 * process loads, one `parent -> child` line per import or require, in the file named by
 * $WEIGHTCAST_MODULE_LOG. The lazy-loading test reads it to see what a command pulled in.
 * ES modules are seen by a resolve hook (module-log-hooks.ts); CommonJS requires (bin/weightcast.cjs,
 * the route loader, a route script's own requires), which that hook does not see, by wrapping
 * `Module.prototype.require`.
 */

import { appendFileSync } from 'node:fs';
import { Module, register } from 'node:module';
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';

const path = process.env['WEIGHTCAST_MODULE_LOG'];
if (path !== undefined && path !== '') {
  register('./module-log-hooks.js', import.meta.url, { data: { path } });
  const internals = Module as unknown as { _resolveFilename(id: string, parent: Module): string };
  const asUrl = (file: string): string => (isAbsolute(file) ? pathToFileURL(file).href : file);
  const required = Object.getOwnPropertyDescriptor(Module.prototype, 'require')?.value as (
    this: Module,
    id: string,
  ) => unknown;
  Module.prototype.require = function (this: Module, id: string): unknown {
    const exports = required.call(this, id);
    appendFileSync(path, `${asUrl(this.filename)} -> ${asUrl(internals._resolveFilename(id, this))}\n`);
    return exports;
  } as Module['require'];
}
