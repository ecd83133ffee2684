/**
 * `planDistribute`: the re-layout planner behind `weightcast distribute`. It reads a catalog
 * snapshot and returns an ordered list of moves and the layout they lead to; it changes nothing.
 *
 * How a plan is made:
 * 1. Target nodes: K active nodes (default all), those holding most copies first, then by name.
 *    Every other node that holds a copy (inactive, or not chosen) is drained.
 * 2. Primaries. `primary` and `replica` modes give each target floor(C/K) or ceil(C/K) primaries (the
 *    ceil to the nodes that already hold most); `round-robin` puts piece i's primary on sigma(i mod K),
 *    sigma the bijection residues -> targets that moves the fewest pieces' bytes, then needs the fewest
 *    promotions (an exact assignment problem). A primary that must move goes by promotion when its new
 *    node already holds a replica (no bytes move), otherwise its bytes move.
 * 3. Replicas. Copies on drained nodes move to the target with fewest copies (relative to its quota)
 *    that lacks the piece. `replica` mode then balances copies per target to floor/ceil of the total,
 *    keeping primaries within floor/ceil(C/K): replica moves from a node over its quota to one under
 *    it, and when none fits, a primary move (paired with a promotion when the counts have no slack),
 *    which always exists (see `CopyBalancer`). So one pass converges: planning again moves nothing.
 * 4. Order. Moves are dealt round-robin across their source nodes so early work spreads over the
 *    tier, keeping the moves of any one piece in the order they were planned.
 * Input is canonicalised first (nodes by name, pieces by index, replicas by name), and every choice
 * breaks ties by node name or a rotation over names, so one snapshot always gives one plan.
 */

import { WeightcastError, assert } from '../../errors.js';
import { assignmentCost, solveAssignment } from './assignment.js';
import { Layout } from './layout.js';
import { reportOf, type LayoutReport } from './report.js';
import {
  DISTRIBUTE_MODES,
  READ_WINDOWS_DEFAULT,
  type CatalogSnapshot,
  type DistributeMode,
  type Move,
  type MoveKind,
  type PieceHolding,
} from './types.js';

export interface DistributeOptions {
  readonly mode: DistributeMode;
  /** Use this many nodes (`--nodes K`); default every active node. */
  readonly nodes?: number;
  /** Read windows for the layout reports; default 8 and 16 pieces. */
  readonly windows?: readonly number[];
}

/** The rotation a round-robin plan chose, and what it saves over plain name order. */
export interface RotationChoice {
  /** `nodes[r]` receives every piece i with i mod K = r. */
  readonly nodes: readonly string[];
  /** Pieces whose primary needs bytes moved under this rotation (the minimum over all rotations). */
  readonly moves: number;
  /** Pieces whose primary role passes to a replica already in place (fewest among those minima). */
  readonly promotes: number;
  /** The same count if residue r simply went to the r-th target by name. */
  readonly nameOrderMoves: number;
}

export interface MoveCounts {
  readonly primary: number;
  readonly replica: number;
  readonly promote: number;
  /** Bytes the byte-moving steps copy. */
  readonly bytes: number;
}

export interface DistributePlan {
  readonly model: string;
  readonly mode: DistributeMode;
  /** The K nodes the layout after uses, in name order. */
  readonly targetNodes: readonly string[];
  /** Nodes that held copies before and hold none after (inactive, or not among the K). */
  readonly drainedNodes: readonly string[];
  readonly rotation?: RotationChoice;
  readonly moves: readonly Move[];
  readonly counts: MoveCounts;
  readonly before: LayoutReport;
  readonly after: LayoutReport;
  /** Every entry after the moves, in index order, with the versions the commits will have made. */
  readonly afterPieces: readonly PieceHolding[];
}

export function isDistributeMode(value: string): value is DistributeMode {
  return (DISTRIBUTE_MODES as readonly string[]).includes(value);
}

export function planDistribute(snapshot: CatalogSnapshot, options: DistributeOptions): DistributePlan {
  if (!isDistributeMode(options.mode)) {
    throw new WeightcastError('SEED_PLAN_INVALID', `mode must be one of ${DISTRIBUTE_MODES.join(', ')}`, {
      mode: options.mode,
    });
  }
  const layout = Layout.from(snapshot);
  const versionsBefore = [...layout.versions];
  const targets = chooseTargets(layout, options.nodes);
  const windows = options.windows ?? READ_WINDOWS_DEFAULT;
  const before = reportOf(layout, targets, windows);
  const heldBefore = layout.copies.map((count) => count > 0);
  const recorder = new Recorder(layout);
  let rotation: RotationChoice | undefined;
  if (options.mode === 'round-robin') {
    rotation = placeRotation(layout, targets, recorder);
  } else {
    balancePrimaries(layout, targets, recorder);
  }
  placeReplicas(layout, targets, options.mode === 'replica', recorder);

  const moves = interleave(recorder.pending, layout.pieceCount).map((step): Move => ({
    piece: step.piece,
    from: layout.nodeNames[step.from]!,
    to: layout.nodeNames[step.to]!,
    kind: step.kind,
    expectVersion: versionsBefore[step.piece]! + step.sequence,
  }));
  const counts = { primary: 0, replica: 0, promote: 0, bytes: 0 };
  for (const move of moves) {
    counts[move.kind]++;
    if (move.kind !== 'promote') counts.bytes += layout.sizes[move.piece]!;
  }
  const plan: DistributePlan = {
    model: layout.model,
    mode: options.mode,
    targetNodes: targets.map((node) => layout.nodeNames[node]!),
    drainedNodes: layout.nodeNames.filter((_, node) => heldBefore[node] && layout.copies[node] === 0),
    moves,
    counts,
    before,
    after: reportOf(layout, targets, windows),
    afterPieces: layout.toHoldings(),
  };
  return rotation === undefined ? plan : { ...plan, rotation };
}

/**
 * Applies moves to a snapshot the way the catalog will commit them (each commit checks the version
 * and adds one) and returns the entries after. Throws SEED_PLAN_INVALID for a move the catalog would
 * refuse: a stale version, a copy that is not there, a target that already holds the piece.
 */
export function applyMoves(snapshot: CatalogSnapshot, moves: readonly Move[]): PieceHolding[] {
  const layout = Layout.from(snapshot);
  moves.forEach((move, step) => {
    const refuse = (why: string): WeightcastError =>
      new WeightcastError('SEED_PLAN_INVALID', `move ${step + 1} (piece ${move.piece}): ${why}`, {
        piece: move.piece,
      });
    const list = layout.holders[move.piece];
    if (list === undefined) throw refuse('no such piece');
    if (layout.versions[move.piece] !== move.expectVersion) {
      throw refuse(`expects version ${move.expectVersion}, entry has ${layout.versions[move.piece]}`);
    }
    const from = layout.nodeNames.indexOf(move.from);
    const to = layout.nodeNames.indexOf(move.to);
    if (from < 0 || to < 0) throw refuse('unknown node');
    const position = list.indexOf(from);
    if (move.kind === 'promote') {
      if (position !== 0 || list.indexOf(to) < 1) throw refuse('promote needs the primary and a replica');
      layout.promote(move.piece, to);
      return;
    }
    if (position < 0 || list.includes(to)) throw refuse('source lacks the piece or target already has it');
    if ((position === 0) !== (move.kind === 'primary'))
      throw refuse(`the copy on ${move.from} is not a ${move.kind}`);
    layout.moveCopy(move.piece, from, to);
  });
  return layout.toHoldings();
}

interface PendingMove {
  readonly piece: number;
  readonly from: number;
  readonly to: number;
  readonly kind: MoveKind;
  /** This move's position among the moves of its piece. */
  readonly sequence: number;
}

/** Applies moves to the working layout and remembers them in planning order. */
class Recorder {
  readonly pending: PendingMove[] = [];
  private readonly movesOfPiece = new Map<number, number>();

  constructor(private readonly layout: Layout) {}

  copy(piece: number, from: number, to: number): void {
    const kind = this.layout.moveCopy(piece, from, to);
    this.pending.push({ piece, from, to, kind, sequence: this.next(piece) });
  }

  promote(piece: number, to: number): void {
    const from = this.layout.primaryOf(piece);
    this.layout.promote(piece, to);
    this.pending.push({ piece, from, to, kind: 'promote', sequence: this.next(piece) });
  }

  private next(piece: number): number {
    const sequence = this.movesOfPiece.get(piece) ?? 0;
    this.movesOfPiece.set(piece, sequence + 1);
    return sequence;
  }
}

function chooseTargets(layout: Layout, requested: number | undefined): number[] {
  const eligible = layout.nodeNames.map((_, node) => node).filter((node) => layout.active[node]);
  if (requested !== undefined && (!Number.isSafeInteger(requested) || requested < 1)) {
    throw new WeightcastError('SEED_PLAN_INVALID', `--nodes must be a positive integer, got ${requested}`);
  }
  const count = requested ?? eligible.length;
  if (count > eligible.length) {
    throw new WeightcastError(
      'SEED_PLACEMENT_IMPOSSIBLE',
      `asked for ${count} nodes but only ${eligible.length} are active`,
      { nodes: count, active: eligible.length },
    );
  }
  const copiesMax = Math.max(0, ...layout.holders.map((list) => list.length));
  if (copiesMax > count) {
    throw new WeightcastError(
      'SEED_PLACEMENT_IMPOSSIBLE',
      `a piece has ${copiesMax} copies, which need ${copiesMax} nodes; only ${count} would be used`,
      { copies: copiesMax, nodes: count },
    );
  }
  const ranked = [...eligible].sort(
    (a, b) => layout.copies[b]! - layout.copies[a]! || layout.primaries[b]! - layout.primaries[a]! || a - b,
  );
  return ranked.slice(0, count).sort((a, b) => a - b);
}

/**
 * Per-node quotas summing to `total` over `targets`: floor or ceil of the mean, the ceil going first
 * to nodes `first` says must have it, then to nodes with the largest `current` (fewest moves).
 */
function quotas(
  layout: Layout,
  targets: readonly number[],
  total: number,
  current: readonly number[],
  first: (node: number, floor: number) => boolean,
): number[] {
  const quota = new Array<number>(layout.nodeNames.length).fill(0);
  if (targets.length === 0) return quota;
  const floor = Math.floor(total / targets.length);
  const extra = total % targets.length;
  const ranked = [...targets].sort(
    (a, b) => Number(first(b, floor)) - Number(first(a, floor)) || current[b]! - current[a]! || a - b,
  );
  ranked.forEach((node, rank) => (quota[node] = floor + (rank < extra ? 1 : 0)));
  return quota;
}

/** Nodes in ascending order starting at a moving cursor, so ties rotate over the targets. */
class Rotation {
  private cursor = 0;

  constructor(private readonly nodes: readonly number[]) {}

  /** The first node from the cursor minimising `key` (skipping undefined keys); advances past it. */
  pick(key: (node: number) => number | undefined): number | undefined {
    let best: number | undefined;
    let bestKey = Number.POSITIVE_INFINITY;
    let bestAt = 0;
    for (let step = 0; step < this.nodes.length; step++) {
      const at = (this.cursor + step) % this.nodes.length;
      const value = key(this.nodes[at]!);
      if (value !== undefined && value < bestKey) {
        best = this.nodes[at]!;
        bestKey = value;
        bestAt = at;
      }
    }
    if (best !== undefined) this.cursor = (bestAt + 1) % this.nodes.length;
    return best;
  }

  /** The first node from the cursor that `accept` takes, stopping there; advances past it. */
  first(accept: (node: number) => boolean): number | undefined {
    for (let step = 0; step < this.nodes.length; step++) {
      const at = (this.cursor + step) % this.nodes.length;
      if (!accept(this.nodes[at]!)) continue;
      this.cursor = (at + 1) % this.nodes.length;
      return this.nodes[at]!;
    }
    return undefined;
  }
}

function piecesByPrimary(layout: Layout): number[][] {
  const lists = layout.nodeNames.map((): number[] => []);
  layout.holders.forEach((list, piece) => lists[list[0]!]!.push(piece));
  return lists;
}

/** `count` of `items`, evenly spaced, so the pieces a node gives up are spread along the file. */
function evenlySpaced<T>(items: readonly T[], count: number): T[] {
  const chosen: T[] = [];
  for (let j = 0; j < count; j++) chosen.push(items[Math.floor((j * items.length) / count)]!);
  return chosen;
}

function balancePrimaries(layout: Layout, targets: readonly number[], recorder: Recorder): void {
  const quota = quotas(layout, targets, layout.pieceCount, layout.primaries, () => false);
  const excess = layout.primaries.map((count, node) => Math.max(0, count - quota[node]!));
  const deficit = layout.primaries.map((count, node) => Math.max(0, quota[node]! - count));
  const sources = excess.flatMap((count, node) => (count > 0 ? [node] : []));
  const owned = piecesByPrimary(layout);
  // Promotions first: a replica already on a node short of primaries takes the role, no bytes moved.
  for (const source of sources) {
    for (const piece of owned[source]!) {
      if (excess[source] === 0) break;
      let best = -1;
      for (const holder of layout.holders[piece]!.slice(1)) {
        if (deficit[holder]! > 0 && (best < 0 || deficit[holder]! > deficit[best]!)) best = holder;
      }
      if (best < 0) continue;
      recorder.promote(piece, best);
      excess[source]!--;
      deficit[best]!--;
    }
  }
  const rotation = new Rotation(targets);
  for (const source of sources) {
    const still = owned[source]!.filter((piece) => layout.primaryOf(piece) === source);
    for (const piece of evenlySpaced(still, excess[source]!)) {
      const target = rotation.pick((node) =>
        deficit[node]! > 0 && !layout.holds(piece, node) ? 0 : undefined,
      );
      assert(target !== undefined, `no target for the primary of piece ${piece}`);
      recorder.copy(piece, source, target);
      deficit[target]!--;
    }
    excess[source] = 0;
  }
}

function placeRotation(layout: Layout, targets: readonly number[], recorder: Recorder): RotationChoice {
  const k = targets.length;
  const column = new Map(targets.map((node, index) => [node, index]));
  // missing[r][t]: pieces of residue r that target t lacks (their bytes must move there);
  // replica[r][t]: pieces of residue r that t holds as a replica (a promotion, no bytes).
  const missing = Array.from({ length: k }, () => new Array<number>(k).fill(0));
  const replica = Array.from({ length: k }, () => new Array<number>(k).fill(0));
  layout.holders.forEach((list, piece) => {
    const row = missing[piece % k]!;
    for (let index = 0; index < k; index++) row[index]!++;
    list.forEach((node, position) => {
      const index = column.get(node);
      if (index === undefined) return;
      row[index]!--;
      if (position > 0) replica[piece % k]![index]!++;
    });
  });
  // Bytes first, then catalog updates: one more moved piece outweighs every promotion there is.
  const weight = layout.pieceCount + 1;
  const cost = missing.map((row, r) => row.map((count, t) => count * weight + replica[r]![t]!));
  const columnOf = solveAssignment(cost);
  const nodeOf = columnOf.map((index) => targets[index]!);
  for (let piece = 0; piece < layout.pieceCount; piece++) {
    const target = nodeOf[piece % k]!;
    const primary = layout.primaryOf(piece);
    if (primary === target) continue;
    if (layout.holds(piece, target)) recorder.promote(piece, target);
    else recorder.copy(piece, primary, target);
  }
  const identity = targets.map((_, index) => index);
  return {
    nodes: nodeOf.map((node) => layout.nodeNames[node]!),
    moves: assignmentCost(missing, columnOf),
    promotes: assignmentCost(replica, columnOf),
    nameOrderMoves: assignmentCost(missing, identity),
  };
}

/**
 * Moves replicas off drained nodes and, when `balance` is set, evens out copies per target while
 * keeping primaries within floor/ceil(C/K).
 */
function placeReplicas(
  layout: Layout,
  targets: readonly number[],
  balance: boolean,
  recorder: Recorder,
): void {
  const isTarget = new Array<boolean>(layout.nodeNames.length).fill(false);
  for (const node of targets) isTarget[node] = true;
  const totalCopies = layout.copies.reduce((sum, count) => sum + count, 0);
  const targetCopies = layout.copies.map((count, node) => (isTarget[node] ? count : 0));
  const quota = balance
    ? quotas(layout, targets, totalCopies, targetCopies, (node, floor) => layout.primaries[node]! > floor)
    : new Array<number>(layout.nodeNames.length).fill(0);
  const balancer = new CopyBalancer(layout, targets, quota, recorder);
  const rotation = new Rotation(targets);
  for (let node = 0; node < layout.nodeNames.length; node++) {
    if (isTarget[node]) continue;
    for (const piece of balancer.replicasOn(node)) {
      assert(layout.primaryOf(piece) !== node, `piece ${piece} still has its primary on a drained node`);
      const target = rotation.pick((candidate) =>
        layout.holds(piece, candidate) ? undefined : layout.copies[candidate]! - quota[candidate]!,
      );
      assert(target !== undefined, `no target for the replica of piece ${piece}`);
      balancer.copy(piece, node, target);
    }
  }
  if (balance) balancer.balance();
}

/**
 * One way to take a copy off node a and add one to node b without breaking anything:
 * - `replica`: move a replica that b lacks;
 * - `primary`: move a primary that b lacks, when a may lose a primary and b may gain one;
 * - `swap`: move a primary that b lacks and promote a piece whose primary is on b and replica on a,
 *   so the primary counts stay put (when the floor/ceil band has no room for a primary step).
 */
interface Step {
  readonly kind: 'replica' | 'primary' | 'swap';
  readonly piece: number;
  readonly promote: number;
}

/**
 * Evens out copies per target node, one step at a time from a node over its quota to one under it.
 * Fast path: replica moves. When no replica fits, a primary step or a swap does, so one pass always
 * converges: say o has more copies than u and every replica on o is also on u. The pieces o holds
 * and u lacks are then primaries of o. If the floor/ceil band forbids moving one, o has no more
 * primaries than u; and if no piece has its primary on u and a replica on o, u holds all of o's
 * replicas plus its own primaries, at least as many copies as o has. Contradiction.
 */
class CopyBalancer {
  /** Per node: pieces it has held as a replica / as the primary (entries may be stale; checked on use). */
  private readonly replicas: number[][];
  private readonly owned: number[][];
  private readonly primariesFloor: number;
  private readonly primariesCeil: number;

  constructor(
    private readonly layout: Layout,
    private readonly targets: readonly number[],
    private readonly quota: readonly number[],
    private readonly recorder: Recorder,
  ) {
    this.replicas = layout.nodeNames.map((): number[] => []);
    this.owned = layout.nodeNames.map((): number[] => []);
    layout.holders.forEach((list, piece) => {
      this.owned[list[0]!]!.push(piece);
      for (const node of list.slice(1)) this.replicas[node]!.push(piece);
    });
    const k = Math.max(1, targets.length);
    this.primariesFloor = Math.floor(layout.pieceCount / k);
    this.primariesCeil = Math.ceil(layout.pieceCount / k);
  }

  replicasOn(node: number): readonly number[] {
    return this.replicas[node]!;
  }

  copy(piece: number, from: number, to: number): void {
    const kind = this.layout.holders[piece]![0] === from ? 'primary' : 'replica';
    this.recorder.copy(piece, from, to);
    (kind === 'primary' ? this.owned : this.replicas)[to]!.push(piece);
  }

  private promote(piece: number, to: number): void {
    const from = this.layout.primaryOf(piece);
    this.recorder.promote(piece, to);
    this.owned[to]!.push(piece);
    this.replicas[from]!.push(piece);
  }

  private over(node: number): boolean {
    return this.layout.copies[node]! > this.quota[node]!;
  }

  private under(node: number): boolean {
    return this.layout.copies[node]! < this.quota[node]!;
  }

  private isReplicaOn(piece: number, node: number): boolean {
    return this.layout.holders[piece]!.indexOf(node) > 0;
  }

  balance(): void {
    const { layout, targets } = this;
    const rotation = new Rotation(targets);
    // Under-quota nodes only fill up and a replica's holders change only when it moves, so a replica
    // that fits no under-quota node now never will: each node's cursor passes it for good.
    const cursors = new Array<number>(layout.nodeNames.length).fill(0);
    for (;;) {
      const sources = targets.filter((node) => this.over(node));
      if (sources.length === 0 || !targets.some((node) => this.under(node))) return;
      let moved = false;
      // One move per over-quota node per round spreads the sources.
      for (const source of sources) {
        const list = this.replicas[source]!;
        for (; cursors[source]! < list.length; cursors[source]!++) {
          const piece = list[cursors[source]!]!;
          if (!this.isReplicaOn(piece, source)) continue;
          const target = rotation.pick((node) =>
            this.under(node) && !layout.holds(piece, node) ? 0 : undefined,
          );
          if (target === undefined) continue;
          this.copy(piece, source, target);
          moved = true;
          break;
        }
      }
      if (!moved) moved = this.stepPrimaries(sources, rotation);
      assert(moved, 'copies over quota with no step to take');
    }
  }

  /** One primary or swap step from each over-quota node that still is; true if any was taken. */
  private stepPrimaries(sources: readonly number[], rotation: Rotation): boolean {
    let moved = false;
    for (const source of sources) {
      if (!this.over(source)) continue;
      let step: Step | undefined;
      const target = rotation.first(
        (node) => this.under(node) && (step = this.findStep(source, node)) !== undefined,
      );
      if (target === undefined || step === undefined) continue;
      this.apply(step, source, target);
      moved = true;
    }
    return moved;
  }

  private apply(step: Step, from: number, to: number): void {
    if (step.kind === 'swap') this.promote(step.promote, from);
    this.copy(step.piece, from, to);
  }

  /** Some step that takes a copy off `from` and adds one to `to`, under the current layout. */
  private findStep(from: number, to: number): Step | undefined {
    const { layout } = this;
    const replica = this.replicas[from]!.find(
      (piece) => this.isReplicaOn(piece, from) && !layout.holds(piece, to),
    );
    if (replica !== undefined) return { kind: 'replica', piece: replica, promote: -1 };
    const primary = this.owned[from]!.find(
      (piece) => layout.primaryOf(piece) === from && !layout.holds(piece, to),
    );
    if (primary === undefined) return undefined;
    if (layout.primaries[from]! > this.primariesFloor && layout.primaries[to]! < this.primariesCeil) {
      return { kind: 'primary', piece: primary, promote: -1 };
    }
    const promote = this.owned[to]!.find(
      (piece) => layout.primaryOf(piece) === to && this.isReplicaOn(piece, from),
    );
    return promote === undefined ? undefined : { kind: 'swap', piece: primary, promote };
  }
}

/**
 * Orders moves by dealing them round-robin over their source nodes (a source's own moves stay in
 * planning order). A move waits while an earlier move of its piece is unplaced; the earliest unplaced
 * move overall is always at the head of its queue and ready, so every round places at least one.
 */
function interleave(pending: readonly PendingMove[], pieceCount: number): PendingMove[] {
  const queues = new Map<number, PendingMove[]>();
  for (const step of pending) {
    const queue = queues.get(step.from);
    if (queue === undefined) queues.set(step.from, [step]);
    else queue.push(step);
  }
  let active = [...queues.keys()]
    .sort((a, b) => a - b)
    .map((node) => ({ queue: queues.get(node)!, next: 0 }));
  const placed = new Int32Array(pieceCount);
  const ordered: PendingMove[] = [];
  while (active.length > 0) {
    const before = ordered.length;
    for (const source of active) {
      const step = source.queue[source.next]!;
      if (step.sequence !== placed[step.piece]) continue;
      ordered.push(step);
      placed[step.piece]!++;
      source.next++;
    }
    assert(ordered.length > before, 'move ordering made no progress');
    active = active.filter((source) => source.next < source.queue.length);
  }
  return ordered;
}
