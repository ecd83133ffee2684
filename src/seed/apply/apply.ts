/**
 * `distribute --apply`: carries out re-layout plans safely.
 *
 * A run: take the model's lock; finish or undo what the journal says an earlier run left open; then
 * up to `passesMax` passes of plan (from the catalog as it is now) and execute, until a plan is
 * empty or a pass ends without conflicts; then wait out the grace period of the last commits and
 * delete the old copies; then empty the journal.
 *
 * One byte-moving move: journal `intent` -> the target copies the piece from the source node
 * (verifying it against the manifest) -> the target hashes its stored copy again (`verify`) ->
 * journal `copied` -> compare-and-swap commit of the new holders at the version the plan read ->
 * journal `committed` -> after the grace period, if the source is still not a holder, delete its copy
 * -> journal `deleted`. A conflict or failed verification rolls the move back (the new copy is
 * deleted unless the catalog names it) and ends it `aborted`; the next pass plans again from the
 * catalog. A promotion is catalog-only: `intent` -> commit -> `committed`.
 *
 * Why nothing is lost: the catalog only ever names a node after that node acknowledged a verified,
 * fsynced copy; a copy is deleted only when the catalog (read after the grace period) does not name
 * its node; recovery undoes only copies the catalog does not name. Moves of one piece run one at a
 * time, and a move to a node cancels a pending deletion of the same piece there (a deletion already
 * running makes the move wait), so a delete never races a move that relies on the same file.
 */

import { setTimeout as sleep } from 'node:timers/promises';
import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError, isWeightcastError, throwIfAborted } from '../../errors.js';
import { CatalogClient } from '../catalog/client.js';
import { SeedNodeClient } from '../node/client.js';
import { planDistribute, type DistributeMode, type DistributePlan, type Move } from '../plan/index.js';
import type { ModelSnapshot } from '../wire.js';
import { MoveJournal, takeLock, type IntentRecord, type JournalStep } from './journal.js';

export const CRASH_STEPS = ['intent', 'copy', 'copied', 'commit', 'committed', 'delete', 'deleted'] as const;
/** A point at which tests can kill the process: after a journal record, or after a remote step. */
export type CrashStep = (typeof CRASH_STEPS)[number];

export interface ApplyOptions {
  schedulerUrl: string;
  /** The operator's credential (and TLS) for the catalog and the seed nodes. */
  access?: ServiceAccess;
  /** The model's hex name. */
  model: string;
  mode: DistributeMode;
  nodes?: number;
  /** Where the move journal and the lock live. */
  stateDir: string;
  /** How long an old copy stays after its commit, for readers holding the old map. */
  graceMs: number;
  /** Moves in flight at once. */
  movesMax: number;
  /** Byte-moving moves touching one node (as source or target) at once. */
  nodeMovesMax: number;
  /** Per node bandwidth for moves; each copy gets an equal share of it. Undefined: no cap. */
  nodeBytesPerSecond?: number;
  /** Plan-and-execute passes (a pass with conflicts plans again). Default 3. */
  passesMax?: number;
  signal?: AbortSignal;
  onEvent?: (event: ApplyEvent) => void;
  /** Fault injection: called at every crash point; a test kills the process here. */
  crashPoint?: (step: CrashStep) => void;
  /** Test hook: runs before each commit (a concurrent catalog update can be made here). */
  beforeCommit?: (move: Move) => Promise<void>;
}

export type MoveOutcome = 'committed' | 'conflict' | 'verify-failed' | 'failed' | 'skipped';

export type ApplyEvent =
  | { type: 'recovered'; resumed: number; rolledBack: number }
  | { type: 'plan'; pass: number; plan: DistributePlan }
  | {
      type: 'move';
      id: string;
      piece: number;
      kind: Move['kind'];
      from: string;
      to: string;
      outcome: MoveOutcome;
      reason?: string;
    }
  | { type: 'deleted'; id: string; piece: number; node: string; kept: boolean }
  | { type: 'progress'; bytesDone: number; bytesTotal: number }
  | { type: 'waiting-grace'; ms: number };

export interface ApplyResult {
  passes: number;
  /** The first pass's plan (what the run set out to do). */
  firstPlan: DistributePlan | undefined;
  committed: number;
  conflicts: number;
  failed: number;
  deleted: number;
  resumed: number;
  rolledBack: number;
  /** Pieces whose bytes moved, per piece index. */
  movedPieces: number[];
  snapshot: ModelSnapshot;
}

interface Deletion {
  id: string;
  piece: number;
  node: string;
  dueMs: number;
}

/** Pending moves the executor scans for startable ones, so large plans stay cheap per step. */
const LOOKAHEAD = 1024;

export async function applyDistribute(options: ApplyOptions): Promise<ApplyResult> {
  const release = await takeLock(options.stateDir, options.model);
  try {
    const journal = await MoveJournal.open(`${options.stateDir}/${options.model}.journal`);
    try {
      return await new Applier(options, journal).run();
    } finally {
      await journal.close();
    }
  } finally {
    await release();
  }
}

class Applier {
  private readonly catalog: CatalogClient;
  private readonly clients = new Map<string, SeedNodeClient>();
  private readonly deletions: Deletion[] = [];
  /** `piece:node` of deletions running now. */
  private readonly deleting = new Set<string>();
  private readonly nodeMoves = new Map<string, number>();
  private wake: (() => void) | undefined;
  private movesDone = false;
  private graceAnnounced = false;
  private readonly result: Omit<ApplyResult, 'snapshot' | 'passes' | 'firstPlan'> = {
    committed: 0,
    conflicts: 0,
    failed: 0,
    deleted: 0,
    resumed: 0,
    rolledBack: 0,
    movedPieces: [],
  };
  private bytesDone = 0;
  private bytesTotal = 0;
  /** Stops the deletion loop when the run fails (the journal keeps what it had left to delete). */
  private readonly stopDeletions = new AbortController();
  private readonly deletionSignal: AbortSignal;

  constructor(
    private readonly options: ApplyOptions,
    private readonly journal: MoveJournal,
  ) {
    this.catalog = new CatalogClient(options.schedulerUrl, options.access);
    this.deletionSignal = options.signal
      ? AbortSignal.any([options.signal, this.stopDeletions.signal])
      : this.stopDeletions.signal;
  }

  async run(): Promise<ApplyResult> {
    const { signal } = this.options;
    const deleter = this.deletionLoop();
    // The loop's failure surfaces when it is awaited below; until then it must not go unhandled.
    deleter.catch(() => undefined);
    let passes = 0;
    let firstPlan: DistributePlan | undefined;
    try {
      await this.recover();
      const passesMax = this.options.passesMax ?? 3;
      while (passes < passesMax) {
        throwIfAborted(signal, 'distribute');
        const snapshot = await this.catalog.requireSnapshot(this.options.model, { signal });
        this.learnNodes(snapshot);
        const plan = planDistribute(
          { model: this.options.model, nodes: snapshot.nodes, pieces: snapshot.pieces },
          {
            mode: this.options.mode,
            ...(this.options.nodes === undefined ? {} : { nodes: this.options.nodes }),
          },
        );
        passes++;
        firstPlan ??= plan;
        this.options.onEvent?.({ type: 'plan', pass: passes, plan });
        if (plan.moves.length === 0) break;
        const before = { conflicts: this.result.conflicts, failed: this.result.failed };
        await this.execute(plan, snapshot);
        if (this.result.failed > before.failed) break;
        if (this.result.conflicts === before.conflicts) break;
      }
    } catch (error) {
      this.stopDeletions.abort();
      await deleter.catch(() => undefined);
      throw error;
    } finally {
      this.movesDone = true;
      this.wake?.();
    }
    await deleter;
    await this.journal.clear();
    const snapshot = await this.catalog.requireSnapshot(this.options.model, { signal });
    return { ...this.result, passes, firstPlan, snapshot };
  }

  // ---- recovery ----------------------------------------------------------------------------------

  /** Finishes moves an earlier run committed, and undoes the ones it did not. */
  private async recover(): Promise<void> {
    const open = this.journal.unfinished();
    if (open.length === 0) return;
    const snapshot = await this.catalog.requireSnapshot(this.options.model, { signal: this.options.signal });
    this.learnNodes(snapshot);
    let resumed = 0;
    let rolledBack = 0;
    for (const move of open) {
      const { intent } = move;
      const entry = snapshot.pieces[intent.piece];
      if (entry === undefined) throw new WeightcastError('SEED_PLAN_INVALID', `no piece ${intent.piece}`);
      let committedAtMs = move.committedAtMs;
      if (
        committedAtMs === undefined &&
        entry.version === intent.expectVersion + 1 &&
        sameList(entry.holders, intent.after)
      ) {
        // Committed, but the run died before journalling it: the grace period starts now.
        committedAtMs = Date.now();
        await this.journal.append({ t: 'committed', id: intent.id, atMs: committedAtMs });
      }
      if (committedAtMs !== undefined) {
        if (intent.kind !== 'promote') {
          this.deletions.push({
            id: intent.id,
            piece: intent.piece,
            node: intent.from,
            dueMs: committedAtMs + this.options.graceMs,
          });
        }
        resumed++;
        continue;
      }
      if (intent.kind !== 'promote' && !entry.holders.includes(intent.to)) {
        await this.dropCopy(intent.to, intent.piece);
      }
      await this.journal.append({
        t: 'aborted',
        id: intent.id,
        reason: 'rolled back: not committed before a crash',
      });
      rolledBack++;
    }
    this.result.resumed += resumed;
    this.result.rolledBack += rolledBack;
    this.options.onEvent?.({ type: 'recovered', resumed, rolledBack });
  }

  // ---- one pass ----------------------------------------------------------------------------------

  private async execute(plan: DistributePlan, snapshot: ModelSnapshot): Promise<void> {
    const { signal } = this.options;
    const afters = holdersAfterEachMove(snapshot, plan.moves);
    this.bytesTotal += plan.counts.bytes;
    const waiting = plan.moves.map((move, index) => ({ move, after: afters[index]!, started: false }));
    const busyPieces = new Set<number>();
    const deadPieces = new Set<number>();
    const running = new Set<Promise<void>>();
    let head = 0;
    while (head < waiting.length || running.size > 0) {
      throwIfAborted(signal, 'distribute');
      let scanned = 0;
      for (let index = head; index < waiting.length && scanned < LOOKAHEAD; index++) {
        const item = waiting[index]!;
        if (item.started) continue;
        scanned++;
        if (running.size >= this.options.movesMax) break;
        const { move } = item;
        if (deadPieces.has(move.piece)) {
          item.started = true;
          this.emitMove(move, 'skipped', 'an earlier move of this piece did not commit');
          continue;
        }
        if (busyPieces.has(move.piece) || !this.canStart(move)) continue;
        item.started = true;
        busyPieces.add(move.piece);
        this.takeSlots(move);
        const task = this.runMove(move, item.after)
          .then((outcome) => {
            if (outcome !== 'committed') deadPieces.add(move.piece);
          })
          .finally(() => {
            busyPieces.delete(move.piece);
            this.releaseSlots(move);
            running.delete(task);
          });
        running.add(task);
      }
      while (head < waiting.length && waiting[head]!.started) head++;
      if (running.size === 0) {
        if (head >= waiting.length) break;
        // Only a running deletion of the same piece can hold a move back: wait for it.
        await sleep(20, undefined, signal ? { signal } : undefined);
        continue;
      }
      await Promise.race(running);
    }
  }

  private canStart(move: Move): boolean {
    if (move.kind === 'promote') return true;
    if (this.deleting.has(`${move.piece}:${move.to}`)) return false;
    const limit = this.options.nodeMovesMax;
    return (this.nodeMoves.get(move.from) ?? 0) < limit && (this.nodeMoves.get(move.to) ?? 0) < limit;
  }

  private takeSlots(move: Move): void {
    if (move.kind === 'promote') return;
    for (const node of [move.from, move.to]) this.nodeMoves.set(node, (this.nodeMoves.get(node) ?? 0) + 1);
  }

  private releaseSlots(move: Move): void {
    if (move.kind === 'promote') return;
    for (const node of [move.from, move.to]) this.nodeMoves.set(node, (this.nodeMoves.get(node) ?? 1) - 1);
  }

  private async runMove(move: Move, after: string[]): Promise<MoveOutcome> {
    const { signal } = this.options;
    const id = `${move.piece}:v${move.expectVersion}:${move.kind}:${move.to}`;
    const intent: IntentRecord = { t: 'intent', id, ...move, after };
    await this.record(intent, 'intent');
    if (move.kind !== 'promote') {
      await this.cancelDeletion(move.piece, move.to);
      const target = this.client(move.to);
      const source = this.client(move.from);
      try {
        await target.copyFrom(
          this.options.model,
          move.piece,
          source.base.replace(/\/v1\/seed\/models$/, ''),
          {
            signal,
            ...(this.options.nodeBytesPerSecond === undefined
              ? {}
              : { bytesPerSecond: this.options.nodeBytesPerSecond / this.options.nodeMovesMax }),
          },
        );
        this.crash('copy');
        const verdict = await target.verifyPiece(this.options.model, move.piece, { signal });
        if (!verdict.ok) {
          return this.rollBack(intent, 'verify-failed', `the copy on ${move.to} failed verification`);
        }
      } catch (error) {
        if (signal?.aborted === true || isWeightcastError(error, 'ABORTED')) throw error;
        return this.rollBack(intent, 'failed', `copy failed: ${(error as Error).message}`);
      }
      await this.record({ t: 'copied', id }, 'copied');
    }
    await this.options.beforeCommit?.(move);
    const [result] = await this.catalog.commit(
      this.options.model,
      [{ piece: move.piece, expectVersion: move.expectVersion, holders: after }],
      { signal },
    );
    this.crash('commit');
    if (result?.ok !== true) {
      return this.rollBack(intent, 'conflict', `the catalog entry is at version ${result?.version ?? '?'}`);
    }
    const atMs = Date.now();
    await this.record({ t: 'committed', id, atMs }, 'committed');
    this.result.committed++;
    if (move.kind !== 'promote') {
      this.result.movedPieces.push(move.piece);
      this.deletions.push({ id, piece: move.piece, node: move.from, dueMs: atMs + this.options.graceMs });
      this.wake?.();
      this.bytesDone += (await this.pieceBytes(move.piece)) ?? 0;
      this.options.onEvent?.({ type: 'progress', bytesDone: this.bytesDone, bytesTotal: this.bytesTotal });
    }
    this.emitMove(move, 'committed');
    return 'committed';
  }

  /** Undoes a move that will not commit: its new copy goes unless the catalog names that node. */
  private async rollBack(intent: IntentRecord, outcome: MoveOutcome, reason: string): Promise<MoveOutcome> {
    if (intent.kind !== 'promote') {
      const snapshot = await this.catalog.requireSnapshot(this.options.model, {
        signal: this.options.signal,
      });
      if (!snapshot.pieces[intent.piece]?.holders.includes(intent.to))
        await this.dropCopy(intent.to, intent.piece);
    }
    await this.journal.append({ t: 'aborted', id: intent.id, reason });
    if (outcome === 'conflict') this.result.conflicts++;
    else this.result.failed++;
    this.emitMove(intent, outcome, reason);
    return outcome;
  }

  // ---- deletions after the grace period ----------------------------------------------------------

  private async cancelDeletion(piece: number, node: string): Promise<void> {
    const cancelled = this.deletions.filter((deletion) => deletion.piece === piece && deletion.node === node);
    for (const deletion of cancelled) this.deletions.splice(this.deletions.indexOf(deletion), 1);
    for (const deletion of cancelled) {
      // The copy stays: a move is about to rely on it. The old move has nothing left to do.
      await this.journal.append({ t: 'deleted', id: deletion.id });
      this.options.onEvent?.({ type: 'deleted', id: deletion.id, piece, node, kept: true });
    }
  }

  private async deletionLoop(): Promise<void> {
    const signal = this.deletionSignal;
    for (;;) {
      if (this.deletions.length === 0) {
        if (this.movesDone) return;
        await this.sleepUntilWoken(60_000);
        continue;
      }
      const dueMs = Math.min(...this.deletions.map((deletion) => deletion.dueMs));
      const waitMs = dueMs - Date.now();
      if (waitMs > 0) {
        if (this.movesDone && !this.graceAnnounced) {
          this.graceAnnounced = true;
          this.options.onEvent?.({ type: 'waiting-grace', ms: waitMs });
        }
        await this.sleepUntilWoken(waitMs);
        continue;
      }
      throwIfAborted(signal, 'distribute');
      await this.deleteDue();
    }
  }

  private async sleepUntilWoken(ms: number): Promise<void> {
    const signal = this.deletionSignal;
    const woken = new Promise<void>((resolve) => (this.wake = resolve));
    const timer = new AbortController();
    const timeout = sleep(ms, undefined, {
      signal: signal ? AbortSignal.any([signal, timer.signal]) : timer.signal,
    });
    await Promise.race([woken, timeout.catch(() => undefined)]);
    timer.abort();
    this.wake = undefined;
    throwIfAborted(signal, 'distribute');
  }

  private async deleteDue(): Promise<void> {
    const now = Date.now();
    const due = this.deletions.filter((deletion) => deletion.dueMs <= now);
    for (const deletion of due) {
      this.deletions.splice(this.deletions.indexOf(deletion), 1);
      this.deleting.add(`${deletion.piece}:${deletion.node}`);
    }
    try {
      const snapshot = await this.catalog.requireSnapshot(this.options.model, {
        signal: this.options.signal,
      });
      for (const deletion of due) {
        const kept = snapshot.pieces[deletion.piece]?.holders.includes(deletion.node) === true;
        if (!kept) {
          await this.dropCopy(deletion.node, deletion.piece);
          this.crash('delete');
        }
        await this.record({ t: 'deleted', id: deletion.id }, 'deleted');
        this.result.deleted += kept ? 0 : 1;
        this.options.onEvent?.({
          type: 'deleted',
          id: deletion.id,
          piece: deletion.piece,
          node: deletion.node,
          kept,
        });
        this.deleting.delete(`${deletion.piece}:${deletion.node}`);
      }
    } finally {
      for (const deletion of due) this.deleting.delete(`${deletion.piece}:${deletion.node}`);
    }
  }

  // ---- helpers -----------------------------------------------------------------------------------

  private async record(
    record: Parameters<MoveJournal['append']>[0],
    step: JournalStep & CrashStep,
  ): Promise<void> {
    await this.journal.append(record);
    this.crash(step);
  }

  private crash(step: CrashStep): void {
    this.options.crashPoint?.(step);
  }

  private async dropCopy(node: string, piece: number): Promise<void> {
    try {
      await this.client(node).deletePiece(this.options.model, piece, { signal: this.options.signal });
    } catch (error) {
      // A node that never received the model holds nothing to drop.
      if (!isWeightcastError(error, 'SEED_UNKNOWN_MODEL')) throw error;
    }
  }

  private learnNodes(snapshot: ModelSnapshot): void {
    for (const node of snapshot.nodes) {
      if (this.clients.get(node.name)?.base.startsWith(node.url.replace(/\/+$/, '')) !== true) {
        this.clients.set(node.name, new SeedNodeClient(node.name, node.url, this.options.access));
      }
    }
  }

  private client(name: string): SeedNodeClient {
    const client = this.clients.get(name);
    if (client === undefined) {
      throw new WeightcastError('SEED_UNKNOWN_NODE', `seed node ${name} is not in the catalog`, {
        node: name,
      });
    }
    return client;
  }

  private sizes: number[] | undefined;

  private async pieceBytes(piece: number): Promise<number | undefined> {
    if (this.sizes === undefined) {
      const snapshot = await this.catalog.requireSnapshot(this.options.model, {
        signal: this.options.signal,
      });
      this.sizes = snapshot.pieces.map((entry) => entry.sizeBytes);
    }
    return this.sizes[piece];
  }

  private emitMove(move: Move | IntentRecord, outcome: MoveOutcome, reason?: string): void {
    this.options.onEvent?.({
      type: 'move',
      id: `${move.piece}:v${move.expectVersion}:${move.kind}:${move.to}`,
      piece: move.piece,
      kind: move.kind,
      from: move.from,
      to: move.to,
      outcome,
      ...(reason === undefined ? {} : { reason }),
    });
  }
}

/** The holders each move commits (primary first), replaying the plan in order from the snapshot. */
export function holdersAfterEachMove(snapshot: ModelSnapshot, moves: readonly Move[]): string[][] {
  const current = new Map<number, string[]>();
  return moves.map((move) => {
    const holders = [...(current.get(move.piece) ?? snapshot.pieces[move.piece]?.holders ?? [])];
    const at = holders.indexOf(move.kind === 'promote' ? move.to : move.from);
    if (at < 0) {
      throw new WeightcastError(
        'SEED_PLAN_INVALID',
        `move of piece ${move.piece}: ${move.from} holds no copy`,
      );
    }
    if (move.kind === 'promote') {
      const primary = holders[0]!;
      holders[0] = move.to;
      holders[at] = primary;
    } else {
      holders[at] = move.to;
    }
    const after = [holders[0]!, ...holders.slice(1).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))];
    current.set(move.piece, after);
    return after;
  });
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((name, index) => name === b[index]);
}
