/**
 * Every subcommand, in the order `weightcast --help` lists them.
 *
 * A definition module names its command and declares its arguments, options and help; its action
 * imports the module under ../commands that does the work only when the command runs. So
 * `weightcast --help`, and a command that fails on its flags, load commander and these modules and
 * nothing of the swarm, loader, seed tier, zod or undici (test/cli/lazy-load.test.ts checks it).
 * A definition may read a default from a module that holds only constants (src/pull/defaults.ts,
 * src/swarm/scheduler/defaults.ts, ...), never from the implementation.
 */

import type { Command } from 'commander';
import type { CliIo } from '../io.js';
import { registerAgent } from './agent.js';
import { registerDistribute } from './distribute.js';
import { registerInspect } from './inspect.js';
import { registerLoad } from './load.js';
import { registerManifest } from './manifest.js';
import { registerPlan } from './plan.js';
import { registerPreshard } from './preshard.js';
import { registerPull } from './pull.js';
import { registerPut } from './put.js';
import { registerScheduler } from './scheduler.js';
import { registerServe } from './serve.js';
import { registerSim } from './sim.js';
import { registerSynth } from './synth.js';
import { registerVerify } from './verify.js';

export type RegisterCommand = (program: Command, io: CliIo, setExitCode: (code: number) => void) => void;

export const COMMANDS: RegisterCommand[] = [
  registerSynth,
  registerInspect,
  registerManifest,
  registerVerify,
  registerPlan,
  registerPull,
  registerLoad,
  registerPreshard,
  registerScheduler,
  registerAgent,
  registerSim,
  registerPut,
  registerDistribute,
  registerServe,
];
