#!/usr/bin/env node
// The only place that calls process.exit: command functions return exit codes.
//
// `agent` and `pull`, which a fan-out starts on every host at once, begin with one file holding
// their usual route (dist/src/cli/route/NAME.js, made by `npm run build`: scripts/bundle-commands.ts).
// Help, every other command, and a build without that step (plain tsc) begin with the CLI's main
// module. Both run the same code: the route file only loads faster.
import { existsSync } from 'node:fs';

const argv = process.argv.slice(2);
const named = argv[0] === 'agent' || argv[0] === 'pull' ? argv[0] : undefined;
const route =
  named === undefined || argv.includes('--help') || argv.includes('-h')
    ? undefined
    : new URL(`../dist/src/cli/route/${named}.js`, import.meta.url);
const { main } = await import(
  route !== undefined && existsSync(route) ? route.href : '../dist/src/cli/main.js'
);
process.exit(await main(argv));
