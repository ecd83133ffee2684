#!/usr/bin/env node
// The only place that calls process.exit: command functions return exit codes.
//
// `agent` and `pull`, which a fan-out starts on every host at once, begin with one script holding
// their usual route (dist/src/cli/route/NAME.cjs, made by `npm run build`: scripts/bundle-commands.ts),
// compiled with V8's code cache beside it (src/cli/route-cache.ts). Help, every other command, and a
// build without that step (plain tsc) begin with the CLI's main module. Both run the same code: the
// route only starts faster.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const argv = process.argv.slice(2);
const named = argv[0] === 'agent' || argv[0] === 'pull' ? argv[0] : undefined;
const route =
  named === undefined || argv.includes('--help') || argv.includes('-h')
    ? undefined
    : fileURLToPath(new URL(`../dist/src/cli/route/${named}.cjs`, import.meta.url));
if (route !== undefined && existsSync(route)) {
  const { runRoute } = await import('../dist/src/cli/route-cache.js');
  process.exit(await runRoute(route, argv));
}
const { main } = await import('../dist/src/cli/main.js');
process.exit(await main(argv));
