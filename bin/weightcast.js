#!/usr/bin/env node
// The only place that calls process.exit: command functions return exit codes.
import { main } from '../dist/src/cli/main.js';

process.exit(await main(process.argv.slice(2)));
