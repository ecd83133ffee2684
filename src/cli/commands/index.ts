/** Every subcommand, in the order `weightcast --help` lists them. */

import type { Command } from 'commander';
import type { CliIo } from '../io.js';
import { registerInspect } from './inspect.js';
import { registerManifest } from './manifest.js';
import { registerPull } from './pull.js';
import { registerLoad } from './load.js';
import { registerPreshard } from './preshard.js';
import { registerVerify } from './verify.js';
import { registerPlan } from './plan.js';
import { registerSim } from './sim.js';
import { registerScheduler } from './scheduler.js';
import { registerAgent } from './agent.js';
import { registerSynth } from './synth.js';
import { registerPut } from './put.js';
import { registerDistribute } from './distribute.js';

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
];
