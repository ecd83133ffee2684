/**
 * Preload for a child process (`node --import .../module-log.js`): records every ES module the
 * process resolves, one `parent -> child` line per import, in the file named by
 * $WEIGHTCAST_MODULE_LOG. The lazy-loading test reads it to see what a command pulled in.
 */

import { register } from 'node:module';

const path = process.env['WEIGHTCAST_MODULE_LOG'];
if (path !== undefined && path !== '') {
  register('./module-log-hooks.js', import.meta.url, { data: { path } });
}
