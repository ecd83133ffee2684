/**
 * End-to-end checks of a slice load, pure. A plan manifest is only useful if it describes exactly the
 * plan this loader built (same layout, same model files, same slices): `matchPlanManifest` checks
 * that and returns the manifest's entry for each tensor of the rank, whose SHA-256 each fetched slice
 * must then match (`checkSliceBytes`, PLAN_SLICE_HASH_MISMATCH).
 */

import { WeightcastError } from '../../errors.js';
import type { PlanManifest, PlanManifestTensor } from '../plan/plan-manifest.js';
import type { ParallelPlan, RankPlan, TensorSlice } from '../plan/types.js';

function mismatch(message: string, details: Record<string, unknown> = {}): WeightcastError {
  return new WeightcastError(
    'PLAN_MANIFEST_INVALID',
    `the plan manifest does not describe this load: ${message}`,
    details,
  );
}

function sameSlice(a: TensorSlice | null, b: TensorSlice | null): boolean {
  if (a === null || b === null) return a === b;
  return a.dim === b.dim && a.start === b.start && a.length === b.length && a.padded === b.padded;
}

/**
 * The manifest's tensors of `rank`, by name, after checking that the manifest was made for this
 * layout, these files (by size) and exactly these slices.
 */
export function matchPlanManifest(
  manifest: PlanManifest,
  plan: ParallelPlan,
  rank: RankPlan,
  files: ReadonlyArray<{ path: string; size: number }>,
): Map<string, PlanManifestTensor> {
  const layout = (p: { tp: number; pp: number; ep: number; weights: number[] | null }): string =>
    `tp ${p.tp}, pp ${p.pp}, ep ${p.ep}, weights ${p.weights === null ? 'even' : p.weights.join(',')}`;
  if (layout(manifest) !== layout(plan) || manifest.architecture !== plan.architecture) {
    throw mismatch(
      `it is for ${manifest.architecture} ${layout(manifest)}, the load is ${plan.architecture} ${layout(plan)}`,
    );
  }
  const sizes = new Map(files.map((file) => [file.path, file.size]));
  for (const file of manifest.files) {
    if (sizes.get(file.path) !== file.size) {
      throw mismatch(
        `file ${file.path} has ${sizes.get(file.path) ?? 'no'} bytes here, ${file.size} in the manifest`,
        {
          file: file.path,
        },
      );
    }
  }
  const entry = manifest.ranks[rank.rank];
  if (entry === undefined) throw mismatch(`it has no rank ${rank.rank}`);
  const byName = new Map(entry.tensors.map((tensor) => [tensor.name, tensor]));
  if (byName.size !== rank.tensors.length) {
    throw mismatch(
      `rank ${rank.rank} holds ${rank.tensors.length} tensors, the manifest lists ${byName.size}`,
    );
  }
  for (const tensor of rank.tensors) {
    const listed = byName.get(tensor.name);
    const same =
      listed !== undefined &&
      listed.file === tensor.file &&
      listed.dtype === tensor.dtype &&
      listed.bytes === tensor.bytes &&
      listed.shape.length === tensor.shape.length &&
      listed.shape.every((size, dim) => size === tensor.shape[dim]) &&
      sameSlice(listed.slice, tensor.slice);
    if (!same) {
      throw mismatch(`rank ${rank.rank}: tensor ${tensor.name} differs from the manifest's entry`, {
        tensor: tensor.name,
      });
    }
  }
  return byName;
}
