/**
 * One host of a chaos row, the user's flow: start `weightcast agent`, and once it listens
 * `weightcast pull ... --agent URL`; the host is done when that pull exits 0. `crash` is the
 * benchmark's kill -9 of the host's agent and pull (by PID, both ours); the run then starts the
 * agent again on the same cache and port, and its pull again, at most HOST_STARTS_MAX times in all.
 * Every wait is bounded by the row's deadline.
 */

import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { firstMatch, stopChild, tailOf, waitForExit } from '../netns/children.js';
import { exitText } from '../netns/leg-runtime.js';
import { HOST_STARTS_MAX } from './plan.js';
import { pullError, type HostOutcome } from './report.js';

export const AGENT_LISTENING = /weightcast agent listening on (http:\/\/\S+)/;
/** How long a killed process may take to be gone, and a finished one's output to drain. */
const EXIT_WAIT_MS = 10_000;
const DRAIN_MS = 2000;

export interface HostCommands {
  label: string;
  agentArgv: readonly string[];
  pullArgv: readonly string[];
  /** Starts argv in the host's namespace, its output logged under `name`. */
  spawn: (argv: readonly string[], name: string) => ChildProcess;
}

export class HostRun {
  readonly #commands: HostCommands;
  #agent: ChildProcess | undefined;
  #pull: ChildProcess | undefined;
  /** Set by `crash` until the killed processes are gone; the run waits for it before starting again. */
  #crash: Promise<void> | undefined;
  #done = false;
  #starts = 0;

  constructor(commands: HostCommands) {
    this.#commands = commands;
  }

  get label(): string {
    return this.#commands.label;
  }

  /** Runs the host until its pull exits 0, fails, or `deadline` (performance.now()) passes. */
  async run(started: number, deadline: number): Promise<HostOutcome> {
    const { label } = this.#commands;
    const left = (): number => Math.max(0, deadline - performance.now());
    const ended = (error: string): HostOutcome => ({
      label,
      seconds: undefined,
      starts: this.#starts,
      error,
    });
    while (this.#starts < HOST_STARTS_MAX) {
      this.#starts++;
      const crash = this.#crash;
      if (crash !== undefined) await crash;
      this.#crash = undefined;
      const agent = this.#start('agent', this.#commands.agentArgv);
      this.#agent = agent;
      try {
        await firstMatch(agent, AGENT_LISTENING, left(), `agent on ${label}`);
      } catch (error) {
        if (this.#crash !== undefined) continue;
        return ended(error instanceof Error ? error.message : String(error));
      }
      if (this.#crash !== undefined) continue;
      const pull = this.#start('pull', this.#commands.pullArgv);
      this.#pull = pull;
      const exit = await waitForExit(pull, left());
      if (this.#crash !== undefined) continue;
      if (exit === undefined) {
        await stopChild(pull);
        return ended(`still running after the row's ${Math.round((deadline - started) / 1000)} s`);
      }
      if (exit.code === 0) {
        this.#done = true;
        return { label, seconds: (performance.now() - started) / 1000, starts: this.#starts };
      }
      await drained(pull);
      return ended(pullError(tailOf(pull).stdout) ?? exitText(exit, pull));
    }
    const crash = this.#crash;
    if (crash !== undefined) await crash;
    return ended(`killed, and ${HOST_STARTS_MAX} starts used`);
  }

  /**
   * kill -9 of the agent and the pull; resolves once both are gone. False (nothing done) when the
   * host has already finished or has no process running.
   */
  crash(): Promise<boolean> {
    const pull = this.#pull;
    if (this.#done || pull?.exitCode === 0) return Promise.resolve(false);
    const victims = [this.#agent, this.#pull].filter(
      (child): child is ChildProcess =>
        child !== undefined && child.exitCode === null && child.signalCode === null,
    );
    if (victims.length === 0) return Promise.resolve(false);
    const gone = Promise.all(
      victims.map(async (child) => {
        child.kill('SIGKILL');
        await waitForExit(child, EXIT_WAIT_MS);
      }),
    ).then(() => undefined);
    this.#crash = gone;
    return gone.then(() => true);
  }

  /** Stops what is still running (the agent serves peers until the row ends). */
  async stop(): Promise<void> {
    const children = [this.#agent, this.#pull].filter((child) => child !== undefined);
    await Promise.all(children.map((child) => stopChild(child)));
  }

  #start(role: 'agent' | 'pull', argv: readonly string[]): ChildProcess {
    return this.#commands.spawn(argv, `${role}-${this.#commands.label}-${this.#starts}`);
  }
}

/** Waits (briefly) until the child's pipes are closed, so its last line is in its tail. */
async function drained(child: ChildProcess): Promise<void> {
  if (child.stdout?.readableEnded === true || child.stdout === null) return;
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  await Promise.race([closed, sleep(DRAIN_MS, undefined, { ref: false })]);
}
