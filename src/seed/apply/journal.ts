/**
 * The move journal of `distribute --apply`: one line per step of each move, appended and fsynced
 * before the step's effect is relied on, so a run killed at any point can be finished or undone by
 * the next one. Steps of a byte-moving move: `intent` (what will happen: piece, from, to, the
 * version expected and the holders after) -> `copied` (the target holds a verified copy) ->
 * `committed` (the catalog took the new holders; with the time, for the grace period) -> `deleted`
 * (the old copy is gone). `aborted` ends a move that was rolled back (conflict, failed verification,
 * recovery of an uncommitted move). A promotion is `intent` -> `committed`.
 *
 * Lines are `<16 hex of SHA-256> <JSON>`; a torn or corrupt tail (a crash mid-append) is cut off on
 * open. The journal is emptied once every move in it has ended. A lock file next to it (holding the
 * owner's PID) keeps two applies of one model on this machine apart; a lock whose process is gone is
 * taken over.
 */

import { createHash } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError } from '../../errors.js';
import { takePidLock } from '../../util/pid-lock.js';
import type { MoveKind } from '../plan/index.js';

export interface IntentRecord {
  t: 'intent';
  id: string;
  piece: number;
  from: string;
  to: string;
  kind: MoveKind;
  expectVersion: number;
  /** The entry's holders once this move commits (primary first). */
  after: string[];
}

export type JournalRecord =
  | IntentRecord
  | { t: 'copied'; id: string }
  | { t: 'committed'; id: string; atMs: number }
  | { t: 'deleted'; id: string }
  | { t: 'aborted'; id: string; reason: string };

export type JournalStep = JournalRecord['t'];

/** A move the journal knows, with the steps recorded so far. */
export interface JournalMove {
  intent: IntentRecord;
  copied: boolean;
  committedAtMs: number | undefined;
  ended: 'deleted' | 'aborted' | undefined;
}

export class MoveJournal {
  /** Appends run one after another: concurrent moves share the file. */
  private tail: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly handle: FileHandle,
    readonly moves: Map<string, JournalMove>,
  ) {}

  static async open(path: string): Promise<MoveJournal> {
    const handle = await open(path, 'a+');
    try {
      const bytes = await handle.readFile();
      const { records, validEnd } = parseJournal(bytes);
      if (validEnd < bytes.length) {
        await handle.truncate(validEnd);
        await handle.datasync();
      }
      const moves = new Map<string, JournalMove>();
      for (const record of records) applyRecord(moves, record);
      return new MoveJournal(handle, moves);
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /** Moves that have not ended (what a new run must resume or roll back first). */
  unfinished(): JournalMove[] {
    return [...this.moves.values()].filter((move) => !isEnded(move));
  }

  append(record: JournalRecord): Promise<void> {
    const json = JSON.stringify(record);
    const check = createHash('sha256').update(json).digest('hex').slice(0, 16);
    const write = async (): Promise<void> => {
      await this.handle.appendFile(`${check} ${json}\n`);
      await this.handle.datasync();
      applyRecord(this.moves, record);
    };
    const done = this.tail.then(write, write);
    this.tail = done.catch(() => undefined);
    return done;
  }

  /** Empties the journal; only when every move in it has ended. */
  async clear(): Promise<void> {
    if (this.unfinished().length > 0) return;
    await this.handle.truncate(0);
    await this.handle.datasync();
    this.moves.clear();
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}

export function isEnded(move: JournalMove): boolean {
  if (move.ended !== undefined) return true;
  return move.intent.kind === 'promote' && move.committedAtMs !== undefined;
}

function applyRecord(moves: Map<string, JournalMove>, record: JournalRecord): void {
  if (record.t === 'intent') {
    moves.set(record.id, { intent: record, copied: false, committedAtMs: undefined, ended: undefined });
    return;
  }
  const move = moves.get(record.id);
  if (move === undefined) return;
  if (record.t === 'copied') move.copied = true;
  else if (record.t === 'committed') move.committedAtMs = record.atMs;
  else if (record.t === 'deleted') move.ended = 'deleted';
  else move.ended = 'aborted';
}

function parseJournal(bytes: Buffer): { records: JournalRecord[]; validEnd: number } {
  const records: JournalRecord[] = [];
  let position = 0;
  let validEnd = 0;
  while (position < bytes.length) {
    const newline = bytes.indexOf(0x0a, position);
    if (newline < 0) break;
    const line = bytes.subarray(position, newline).toString('utf8');
    const json = line.slice(17);
    if (
      line[16] !== ' ' ||
      createHash('sha256').update(json).digest('hex').slice(0, 16) !== line.slice(0, 16)
    ) {
      break;
    }
    try {
      records.push(JSON.parse(json) as JournalRecord);
    } catch {
      break;
    }
    position = newline + 1;
    validEnd = position;
  }
  return { records, validEnd };
}

/** Takes `<dir>/<name>.lock` for this process; a lock left by a dead process is taken over. */
export async function takeLock(dir: string, name: string): Promise<() => Promise<void>> {
  const path = join(dir, `${name}.lock`);
  const locked = (reason: string): WeightcastError =>
    new WeightcastError('SEED_APPLY_LOCKED', `${reason}; lock ${path}`, { file: path });
  try {
    return await takePidLock(path, (owner) =>
      locked(`another distribute (PID ${owner}) is applying to this model`),
    );
  } catch (error) {
    // Taken by another process between our two tries.
    if ((error as NodeJS.ErrnoException).code === 'EEXIST')
      throw locked('another process took the lock at the same moment');
    throw error;
  }
}
