/**
 * The peers a member last knew for a model, kept beside the model in the agent's cache
 * (`peers.json`). An agent restarted while the scheduler is gone cannot register, and without them
 * it knows nobody: it read the rest of the model from the origin, beside the chain's head, until the
 * scheduler came back (chaos row stop-scheduler-kill: the restarted hosts ~25.7 s, the others ~13.8).
 *
 * The file is a hint, not state: one that is missing, too large, not JSON or not a list of base
 * URLs is read as no peers. Writes go to a temporary name and are renamed into place, one at a time
 * (a newer list waits for the write under way, and only the newest is written).
 */

import { readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const KEPT_PEERS_FILE = 'peers.json';
/** As the scheduler's lists (protocol.ts): at most 1024 base URLs of at most 2048 characters. */
const PEERS_MAX = 1024;
const URL_CHARS_MAX = 2048;
const FILE_BYTES_MAX = PEERS_MAX * (URL_CHARS_MAX + 4) + 16;

/** The peers kept in `modelDir`, or none. */
export async function readKeptPeers(modelDir: string): Promise<string[]> {
  const path = join(modelDir, KEPT_PEERS_FILE);
  try {
    if ((await stat(path)).size > FILE_BYTES_MAX) return [];
    return keptPeersFrom(JSON.parse(await readFile(path, 'utf8')));
  } catch {
    return [];
  }
}

/** A parsed `peers.json` as a list of base URLs, or none if it is not one. */
export function keptPeersFrom(value: unknown): string[] {
  if (!Array.isArray(value) || value.length > PEERS_MAX) return [];
  const peers: string[] = [];
  for (const item of value) {
    if (typeof item !== 'string' || item.length > URL_CHARS_MAX || !/^https?:\/\/[^\s]+$/.test(item))
      return [];
    peers.push(item);
  }
  return peers;
}

/** Keeps the newest list a member was given in `modelDir`, one write at a time. */
export class PeersKeeper {
  private writing: Promise<void> | undefined;
  private next: readonly string[] | undefined;
  private last = '';

  constructor(private readonly modelDir: string) {}

  keep(peers: readonly string[]): void {
    this.next = peers;
    if (this.writing !== undefined) return;
    // Started on the next turn, so `writing` is set before the drain can end and clear it.
    this.writing = Promise.resolve().then(() => this.drain());
  }

  /** Resolves once nothing is left to write (for tests and for close). */
  async settled(): Promise<void> {
    while (this.writing !== undefined) await this.writing;
  }

  private async drain(): Promise<void> {
    try {
      for (let peers = this.next; peers !== undefined; peers = this.next) {
        this.next = undefined;
        const text = JSON.stringify(peers.slice(0, PEERS_MAX));
        if (text === this.last) continue;
        const path = join(this.modelDir, KEPT_PEERS_FILE);
        const temporary = `${path}.${process.pid}.tmp`;
        try {
          await writeFile(temporary, text + '\n');
          await rename(temporary, path);
          this.last = text;
        } catch {
          // A hint: a cache that cannot take it (full, removed with its model) loses only the hint.
        }
      }
    } finally {
      // No await between the loop's last look at `next` and here: a list kept meanwhile starts anew.
      this.writing = undefined;
    }
  }
}
