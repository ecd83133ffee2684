#!/usr/bin/env node
// The Node entry of the `weightcast` command (bin/weightcast starts it); the only place that calls
// process.exit: command functions return exit codes.
//
// `agent` and `pull`, which a fan-out starts on every host at once, begin with one script holding
// their usual route (dist/src/cli/route/NAME.cjs, made by `npm run build`: scripts/bundle-commands.ts),
// compiled with V8's code cache beside it by the route loader (src/cli/route-cache.ts, bundled as
// dist/src/cli/route-cache.cjs). Help, every other command, and a build without that step (plain tsc)
// begin with the CLI's main module. Both run the same code: the route only starts faster.
//
// This file is CommonJS so that a routed start never sets up Node's ES module loader: an ES entry
// that imports `node:fs` builds the module's whole namespace, loading Node's streams with it, and
// the loader's resolving and linking come on top (a pull 4-5 CPU-ms more, an agent 3-4:
// docs/measurements/2026-12-08-cjs-entry.md). bin/weightcast.js, for `node bin/weightcast.js`, runs it.
'use strict';

const { existsSync } = require('node:fs');
const { join } = require('node:path');

const argv = process.argv.slice(2);
const named = argv[0] === 'agent' || argv[0] === 'pull' ? argv[0] : undefined;
const cli = join(__dirname, '..', 'dist', 'src', 'cli');
const route =
  named === undefined || argv.includes('--help') || argv.includes('-h')
    ? undefined
    : join(cli, 'route', `${named}.cjs`);
const loader = join(cli, 'route-cache.cjs');
const exitCode =
  route !== undefined && existsSync(route) && existsSync(loader)
    ? require(loader).runRoute(route, argv)
    : import('../dist/src/cli/main.js').then(({ main }) => main(argv));
exitCode.then((code) => process.exit(code));
